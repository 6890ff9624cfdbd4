"""The `farm` command line (typer): one Typer per command group, composed in app.py."""
