"""The ``sparring`` command line (typer): each command parses, calls one library function, prints.

Its only public name is the app, :data:`sparring.cli.main.app`; nothing imports the CLI.
"""
