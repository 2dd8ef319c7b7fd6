"""Prompts for the project's tiny pair (`--dataset tiny`).

The trained pair (python/dflash_sglang/assets/tiny-pair/) ships its own held-out prompts: the
first file in the pair directory whose name matches `*held*out*.json*` (JSON or JSONL, any record
shape `prompts.read_file` reads). Until a pair has one, this module's built-in prompts stand in:
requests in the training corpus's style ("Write a Python function `f(args)` that: ..."), written
by hand, plus the model cards' own request.
"""

from __future__ import annotations

from pathlib import Path

from dflash_sglang_tools import EMBEDDED_PAIR

HELD_OUT_GLOB = "*held*out*.json*"

BUILTIN = [
    "Write a quicksort in Python.",
    "Write a Python function `quicksort(items)` that: Return a new list with the items in ascending order.",
    "Write a Python function `is_palindrome(text)` that: Return True if text reads the same backwards.",
    "Write a Python function `chunks(seq, size)` that: Yield successive slices of seq of length size.",
    "Write a Python function `flatten(nested)` that: Return a flat list of the items of nested lists.",
    "Write a Python function `word_count(text)` that: Return a dict mapping each word to its count.",
    "Write a Python function `gcd(a, b)` that: Return the greatest common divisor of a and b.",
    "Write a Python function `fib(n)` that: Return the n-th Fibonacci number.",
    "Write a Python function `read_lines(path)` that: Return the lines of a text file without newlines.",
    "Write a Python function `merge_dicts(*dicts)` that: Return one dict with the keys of all dicts.",
    "Write a Python function `unique(items)` that: Return the items without duplicates, keeping order.",
    "Write a Python function `clamp(value, low, high)` that: Limit value to the range low..high.",
    "Write a Python function `binary_search(items, target)` that: Return the index of target or -1.",
    "Write a Python function `transpose(matrix)` that: Return the transpose of a list of lists.",
    "Write a Python function `parse_bool(text)` that: Convert a string such as 'yes' or 'off' to a bool.",
    "Write a Python function `camel_to_snake(name)` that: Convert a CamelCase name to snake_case.",
    "Write a Python function `median(values)` that: Return the median of a non-empty list of numbers.",
    "Write a Python function `rotate(items, k)` that: Return the list rotated left by k positions.",
    "Write a Python function `count_vowels(text)` that: Return the number of vowels in text.",
    "Write a Python function `split_path(path)` that: Return the directory and the file name of a path.",
    "Write a Python function `is_prime(n)` that: Return True if n is a prime number.",
    "Write a Python function `histogram(values, bins)` that: Count the values falling into each bin.",
    "Write a Python function `retry(func, attempts)` that: Call func until it succeeds or attempts run out.",
    "Write a Python function `escape_html(text)` that: Replace the characters &, < and > by entities.",
]


def held_out_file(pair_dir: str | Path | None = None) -> Path | None:
    directory = Path(pair_dir) if pair_dir else EMBEDDED_PAIR
    if not directory.is_dir():
        return None
    return next(iter(sorted(directory.glob(HELD_OUT_GLOB))), None)


def describe(pair_dir: str | Path | None = None) -> str:
    found = held_out_file(pair_dir)
    if found:
        return f"held-out prompts of the tiny pair, {found}"
    return f"{len(BUILTIN)} built-in prompts (no {HELD_OUT_GLOB} in {pair_dir or EMBEDDED_PAIR})"
