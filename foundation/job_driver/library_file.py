"""Whether stored bytes are a shared library a loader could map, and one TVM built, read from the ELF headers
and symbol table alone (no TVM)."""

from __future__ import annotations

import struct

_ELF_MAGIC = b"\x7fELF"
_ET_DYN = 3
_PT_LOAD = 1
# By ELF class (1: 32-bit, 2: 64-bit): the header's size, and where its fields are.
_HEADER = {
    1: {"size": 52, "phoff": (28, "I"), "shoff": (32, "I"), "phentsize": 42, "phnum": 44, "shentsize": 46,
        "shnum": 48, "p_offset": (4, "I"), "p_filesz": (16, "I"),
        "sh_type": (4, "I"), "sh_offset": (16, "I"), "sh_size": (20, "I"), "sh_link": (24, "I"),
        "sym_size": 16, "st_name": (0, "I"), "st_shndx": (14, "H")},
    2: {"size": 64, "phoff": (32, "Q"), "shoff": (40, "Q"), "phentsize": 54, "phnum": 56, "shentsize": 58,
        "shnum": 60, "p_offset": (8, "Q"), "p_filesz": (32, "Q"),
        "sh_type": (4, "I"), "sh_offset": (24, "Q"), "sh_size": (32, "Q"), "sh_link": (40, "I"),
        "sym_size": 24, "st_name": (0, "I"), "st_shndx": (6, "H")},
}
_SHT_DYNSYM = 11
# What every library TVM exports defines: its modules (a Relax VM's executable among them), packed
# (tvm_ffi/extra/module.h); a loader maps any shared library, TVM loads only one with this.
TVM_LIBRARY_SYMBOL = b"__tvm_ffi__library_bin"


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


def tvm_library_problem(library: bytes) -> str | None:
    """Why ``library``, a shared library (`shared_library_problem` says None), is none TVM built: its
    dynamic symbols define no TVM_LIBRARY_SYMBOL (another program's library, bytes replaced with their
    size and sha256); None if they do."""
    try:
        return _tvm_symbol_missing(library)
    except (struct.error, IndexError, KeyError):
        return f"its section headers or symbol table are damaged or lie beyond its {len(library):,} bytes"


def _tvm_symbol_missing(library: bytes) -> str | None:
    layout = _HEADER[library[4]]
    order = {1: "<", 2: ">"}[library[5]]

    def field(offset: int, spec: tuple[int, str]) -> int:
        return struct.unpack_from(order + spec[1], library, offset + spec[0])[0]

    shoff = field(0, layout["shoff"])
    shentsize = struct.unpack_from(order + "H", library, layout["shentsize"])[0]
    shnum = struct.unpack_from(order + "H", library, layout["shnum"])[0]
    sections = [shoff + i * shentsize for i in range(shnum)]
    for section in sections:
        if field(section, layout["sh_type"]) != _SHT_DYNSYM:
            continue
        start, size = field(section, layout["sh_offset"]), field(section, layout["sh_size"])
        link = field(section, layout["sh_link"])
        if start + size > len(library) or link >= shnum:
            return f"its symbol table lies beyond its {len(library):,} bytes (it was cut short)"
        names_at = field(sections[link], layout["sh_offset"])
        for symbol in range(start, start + size - layout["sym_size"] + 1, layout["sym_size"]):
            if field(symbol, layout["st_shndx"]) == 0:  # undefined here: another library's
                continue
            name_at = names_at + field(symbol, layout["st_name"])
            if library[name_at:name_at + len(TVM_LIBRARY_SYMBOL) + 1] == TVM_LIBRARY_SYMBOL + b"\0":
                return None
    return f"it is a shared library but not one TVM built (it defines no {TVM_LIBRARY_SYMBOL.decode()})"
