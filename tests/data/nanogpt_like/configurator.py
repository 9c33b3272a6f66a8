"""Overrides the caller's globals, as nanoGPT's configurator does: run with
`exec(open("configurator.py").read())` from train.py. Each argument is either a config file (its
assignments are executed) or `--key=value` (value read as a Python literal, of the key's type)."""

import sys
from ast import literal_eval

for arg in sys.argv[1:]:
    if not arg.startswith("--"):
        print(f"Overriding config with {arg}:")
        with open(arg) as config_file:
            source = config_file.read()
        print(source)
        exec(source)
        continue
    key, _, raw = arg[2:].partition("=")
    if key not in globals():
        raise ValueError(f"Unknown config key: {key}")
    try:
        value = literal_eval(raw)
    except (SyntaxError, ValueError):
        value = raw
    if type(value) is not type(globals()[key]):
        raise TypeError(f"{key}: {value!r} is not a {type(globals()[key]).__name__}")
    print(f"Overriding: {key} = {value}")
    globals()[key] = value
