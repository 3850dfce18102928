"""Every script's command line: the fields of its Config dataclass become its flags.

    @dataclass
    class Config:
        epochs: int = option(300, "training epochs")

    given = parse_flags(Config, __doc__)   # {"epochs": 3} for `--epochs 3`; flags not given are absent
"""
import argparse
import dataclasses


def option(default, help: str, **flag):
    """A Config field with its help text; `flag` holds more argparse settings (type, nargs, choices)."""
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=dict(help=help, **flag))
    return dataclasses.field(default=default, metadata=dict(help=help, **flag))


def parse_flags(config_class, doc: str, argv=None, positional=()) -> dict:
    """The values given on the command line, by field name. Every field of the dataclass is a
    flag `--field-name` (booleans also `--no-field-name`), those in `positional` arguments."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     argument_default=argparse.SUPPRESS)
    for f in dataclasses.fields(config_class):
        flag = dict(f.metadata)
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        if f.name not in positional and default not in ("", None, []) and "default" not in flag["help"]:
            flag["help"] += f" (default {default})"
        if f.type in (bool, bool | None):
            flag["action"] = argparse.BooleanOptionalAction
        elif "type" not in flag and not isinstance(default, list):
            flag["type"] = f.type
        parser.add_argument(f.name if f.name in positional else "--" + f.name.replace("_", "-"), **flag)
    return vars(parser.parse_args(argv))


