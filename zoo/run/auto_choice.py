"""The choice of a `python -m zoo train auto` run, kept in its checkpoint directory.

`run_choice` searches (`zoo.run.auto.select`) on the run's training rows, or returns the
choice an interrupted run with the same key stored, so that a resumed run trains the same
model without searching again; `store_choice` writes it atomically once the run has
claimed its directory. CHECKPOINT_FILES are what it may leave there (the run directory's
cleanup knows them).
"""

import json
import os

from zoo.run import auto
from zoo.run.candidates import plain

# A `python -m zoo train auto` run keeps its choice in its checkpoint directory, so that a
# resumed run trains the same model without searching again (and even where a minutes cap
# would cut a repeated search elsewhere).
CHOICE_FILE = "auto_choice.json"
CHECKPOINT_FILES = (CHOICE_FILE, CHOICE_FILE + ".tmp")  # what it may leave there


def run_choice(x, y, key, backup_dir, name="the data", verbose=False):
    """The choice of `select` on raw training rows, or the one an interrupted run stored.

    Args:
        x, y: raw training rows and targets (in the data's units).
        key: JSON-able dict with at least seed, budget_steps and budget_minutes (None or
            a number); a stored choice is reused only under an equal key.
        backup_dir: the run's checkpoint directory (may not exist).
        name: the data's name, for the printed lines.

    Returns:
        dict: model, options, batch_size, epochs, decay_epochs, selection (JSON) and key.
    """
    try:
        with open(os.path.join(backup_dir, CHOICE_FILE), encoding="utf-8") as stream:
            stored = json.load(stream)
    except (OSError, ValueError):
        stored = None
    if isinstance(stored, dict) and stored.get("key") == key:
        print(f"auto: {stored['model']} for {stored['epochs']} epochs, as the interrupted run "
              "chose (no new search)", flush=True)
        return stored
    print(f"auto: choosing a model on the {len(x)} training rows of {name}"
          + ("" if key["budget_steps"] is None else f" (at most {key['budget_steps']:,} steps)")
          + ("" if key["budget_minutes"] is None else f" (at most {key['budget_minutes']:g} min)"),
          flush=True)
    selection = auto.select(x, y, seed=key["seed"], budget_steps=key["budget_steps"],
                            budget_minutes=key["budget_minutes"], candidates=auto.CANDIDATES,
                            verbose=bool(verbose))
    chosen = selection.candidate
    print(f"auto: chose {chosen.name} ({chosen.model}), {selection.epochs} epochs, after "
          f"{len(selection.trials)} candidate(s) in {selection.seconds:.0f} s", flush=True)
    return {"model": chosen.model, "options": plain(chosen.options),
            "batch_size": chosen.batch_for(len(x)), "epochs": selection.epochs,
            "decay_epochs": selection.max_epochs, "selection": selection.to_json(), "key": key}


def store_choice(backup_dir, choice):
    """Writes `choice` for a resumed run, atomically; an existing file stays (a resumed
    run's own, or another run's, whose checkpoint then refuses this run)."""
    path = os.path.join(backup_dir, CHOICE_FILE)
    if os.path.exists(path):
        return
    os.makedirs(backup_dir, exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as stream:
        json.dump(choice, stream)
    os.replace(path + ".tmp", path)
