"""The seed cards' option names, accepted as the SGLang 0.5.23 options they mean.

The Qwen3.5/3.6 DFlash cards were written against a newer SGLang: run verbatim against 0.5.23,
`--mamba-scheduler-strategy` and `--speculative-dflash-draft-window-size` fail at argument
parsing. Each alias writes the same parsed field as SGLang's own option (same choices, same
type), appears in `--help`, and leaves the default to the original (`argparse.SUPPRESS`).
"""

from __future__ import annotations

import argparse

TARGET = "sglang.srt.server_args.ServerArgs.add_cli_args"

# seed-card name -> SGLang 0.5.23 name
ALIASES = {
    "--mamba-scheduler-strategy": "--mamba-radix-cache-strategy",
    "--speculative-dflash-draft-window-size": "--speculative-draft-window-size",
}


def add_seed_card_aliases(result, parser: argparse.ArgumentParser):
    """AFTER ServerArgs.add_cli_args: add each alias next to the option it stands for."""
    known = {option: action for action in parser._actions for option in action.option_strings}
    for alias, original in ALIASES.items():
        action = known.get(original)
        if action is None or alias in known:  # a later SGLang has it, or it is already added
            continue
        parser.add_argument(
            alias,
            dest=action.dest,
            type=action.type,
            choices=action.choices,
            default=argparse.SUPPRESS,
            help=f"Alias of {original}, the name the DFlash model cards use (added by dflash_sglang).",
        )
    return result
