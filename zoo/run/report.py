"""A command's `--out FILE` report: reserved before the work, written once after it.

The zoo never overwrites a file: `reserve` claims `OUT.partial` before any
work, so a bad path fails at once and not after an hour of training;
`publish` writes the text and links it to `OUT`; `discard` drops the claim
if the work failed. `write` does all three around a command's work, the
ending every experiment's `main()` shares.
"""

import os


def reserve(parser, out):
    """Checks a command's `--out` FILE before any work: a new file in a writable directory.

    Creates `OUT.partial` exclusively, so a bad path fails now and not after
    the whole run, and returns its name (None when `out` is None). The
    report goes there and is then linked to `OUT` (`publish`). An
    existing `OUT` or `OUT.partial` is never overwritten or removed.
    """
    if out is None:
        return None
    out_dir = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(out_dir):
        parser.error(f"--out: directory {out_dir} does not exist.")
    if os.path.lexists(out):
        parser.error(f"--out: {out} already exists; the zoo never overwrites a file "
                     "(choose a new name).")
    partial = f"{out}.partial"
    try:
        with open(partial, "x", encoding="utf-8"):
            pass
    except FileExistsError:
        parser.error(f"--out: {partial} exists (left by an interrupted run?); remove it or "
                     "choose another --out.")
    except OSError as error:
        parser.error(f"--out: cannot write in {out_dir}: {error.strerror}.")
    return partial


def publish(partial, out, text):
    """Writes `text` into the reserved `partial` and gives it the name `out`.

    A hard link, not a rename: should a file named `out` have appeared in
    the meantime, it is kept and this raises FileExistsError.
    """
    if partial is None:
        return
    with open(partial, "w", encoding="utf-8") as stream:
        stream.write(text)
    os.link(partial, out)
    os.remove(partial)
    print(f"wrote {out}")


def discard(partial):
    """Removes the reservation `partial` if it is still there (the command made it)."""
    if partial is not None and os.path.exists(partial):
        os.remove(partial)


def show(result, lines=()):
    """Prints a command's Markdown report, then `lines`, then its wall time.

    Args:
        result: a dict with `markdown` and `seconds`.
        lines: more lines to print after the report.

    Returns:
        (result, the Markdown): what `write`'s work returns.
    """
    print()
    print(result["markdown"], end="")
    for line in lines:
        print(line)
    print(f"wall time {result['seconds']:.1f} s")
    return result, result["markdown"]


def write(parser, out, work):
    """Runs `work()` between reserving `out` and publishing its report; returns its result.

    Args:
        parser: the command's ArgumentParser (a bad `out` is `parser.error`).
        out: the report's path, or None for no file.
        work: a function returning (result, report text); it prints what it
            wants shown.

    Returns:
        the result of `work()`. The reservation never outlives the call.
    """
    partial = reserve(parser, out)
    try:
        result, text = work()
        publish(partial, out, text)
    finally:
        discard(partial)  # the command made it; nothing else is touched
    return result
