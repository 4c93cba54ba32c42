from bpfsym.cli import entry

entry()
