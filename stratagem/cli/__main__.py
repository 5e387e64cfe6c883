from stratagem.cli import entry

entry()
