"""Whether stored bytes are a shared library a loader could map, read from the ELF headers alone (no TVM)."""

from __future__ import annotations

import struct

_ELF_MAGIC = b"\x7fELF"
_ET_DYN = 3
_PT_LOAD = 1
# By ELF class (1: 32-bit, 2: 64-bit): the header's size, and where its fields are.
_HEADER = {
    1: {"size": 52, "phoff": (28, "I"), "shoff": (32, "I"), "phentsize": 42, "phnum": 44, "shentsize": 46,
        "shnum": 48, "p_offset": (4, "I"), "p_filesz": (16, "I")},
    2: {"size": 64, "phoff": (32, "Q"), "shoff": (40, "Q"), "phentsize": 54, "phnum": 56, "shentsize": 58,
        "shnum": 60, "p_offset": (8, "Q"), "p_filesz": (32, "Q")},
}


def shared_library_problem(library: bytes) -> str | None:
    """Why ``library`` is no shared library the loader could map (garbage, another kind of file, cut
    short), or None. What it says about the code inside is nothing: only sha256 vouches for that."""
    if library[:4] != _ELF_MAGIC:
        return "it is not an ELF file"
    layout = _HEADER.get(library[4] if len(library) > 4 else 0)
    order = {1: "<", 2: ">"}.get(library[5] if len(library) > 5 else 0)
    if layout is None or order is None or len(library) < layout["size"]:
        return "its ELF header is damaged"

    def field(offset: int, kind: str = "H") -> int:
        return struct.unpack_from(order + kind, library, offset)[0]

    if field(16) != _ET_DYN:
        return "it is an ELF file but not a shared library"
    phoff, shoff = field(*layout["phoff"]), field(*layout["shoff"])
    phentsize, phnum = field(layout["phentsize"]), field(layout["phnum"])
    if phnum == 0 or phoff + phentsize * phnum > len(library):
        return f"its program headers lie beyond its {len(library):,} bytes"
    if shoff + field(layout["shentsize"]) * field(layout["shnum"]) > len(library):
        return f"its section headers lie beyond its {len(library):,} bytes (it was cut short)"
    for entry in range(phoff, phoff + phentsize * phnum, phentsize):
        if field(entry, "I") == _PT_LOAD and field(entry + layout["p_offset"][0], layout["p_offset"][1]) + \
                field(entry + layout["p_filesz"][0], layout["p_filesz"][1]) > len(library):
            return f"a segment it loads lies beyond its {len(library):,} bytes (it was cut short)"
    return None
