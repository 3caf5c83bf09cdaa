"""argparse types and pre-flight checks shared by the subcommands.

A bad value is rejected while parsing (one line, exit code 2) rather than deep inside the search,
where it would be a traceback or, for an absurd count, an endless enumeration of divisors.
Standard library and autoplan.specs only: every command imports this at start-up.
"""
from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

# Upper bounds on counts, far above any real run, so that a typo (an extra zero run, a pasted
# token count) is one clear line instead of minutes of enumerating its divisors. The same bounds
# hold in the files autoplan reads (autoplan.specs.validation, where their sources are given).
from autoplan.specs.validation import MAX_GLOBAL_BATCH, MAX_NUM_GPUS, MAX_SEQ_LEN  # noqa: F401
from autoplan.specs.validation import ascii_float, ascii_int  # noqa: F401  (also the plain numbers' types)

MAX_TRIALS = 10**6
"""Optuna trials of one search: ~10^3 s at ~1 ms a trial; the default is 200."""
MAX_SEED = 2**32 - 1  # numpy's RandomState, which Optuna's samplers seed, takes 0 .. 2**32-1


# Upper bounds on amounts: what a real run could need, with ample headroom, so that a slip of the
# exponent (1e300 tokens, a price of 1e308) is refused with its bound instead of printing a 300-digit
# day count or "$inf".
MAX_TRAIN_TOKENS = 1e15
"""Tokens of one training run: the largest published runs train on ~4e13 (Llama 4, Qwen3: 30-40T)."""
MIN_TRAIN_TOKENS = 1e6
"""A quarter of one optimizer step at the default ~4M-token global batch (training_shape): fewer is no
training run, and its days and GPU-hours print as 0.0 (`cluster --train-tokens 2` answered "0.0 days")."""
MAX_GPU_HOUR_PRICE = 1e4
"""USD per GPU-hour: cloud H100/B200 list prices are ~2-10."""
MAX_BUDGET = 1e12
"""USD for one training run: the largest announced clusters cost ~1e10."""
MAX_DAYS = 36500.0
"""A deadline of a hundred years."""
MIN_DAYS = 1 / 24
"""A deadline of an hour: below it the days print as 0.0 and "past the deadline" as a 300-digit share."""


def _positive(text: str, convert, what: str, upper: float = float("inf"), shown: str | None = None,
              lower: float = 0.0):
    """`text` as a number > 0 (and at least `lower` when given), finite and at most `upper`, by
    `convert` (ascii_int or ascii_float: "1_5" and "٣" are refused); else "must be <what>, got ...".
    `shown`: the text as the user typed it, for the message (default `text`)."""
    shown = text if shown is None else shown
    try:
        value = convert(text)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"must be {what}, got {shown!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be {what}, got {shown!r}")
    if value > upper:
        raise argparse.ArgumentTypeError(f"must be at most {upper:g} ({what}), got {shown!r}")
    if value < lower:
        raise argparse.ArgumentTypeError(f"must be at least {lower:g} ({what}), got {shown!r}")
    return value


MAX_CAPACITY_FACTOR = 64.0
"""Tokens per expert capped at this many times the mean: past the experts' count it caps nothing."""


def capacity_factors(text: str) -> tuple:
    """--moe-capacity-factor C[,C...]: the capacity factors to plan with, 0 for dropless routing, each
    finite and at most MAX_CAPACITY_FACTOR; one value pins it, several are searched."""
    values = []
    for part in text.split(","):
        part = part.strip()
        try:
            dropless = part == "dropless" or ascii_float(part) == 0
        except (ValueError, OverflowError):
            dropless = False
        value = 0.0 if dropless else _positive(part, ascii_float, "capacity factors > 0, or 0 (dropless), "
                                               "comma-separated", upper=MAX_CAPACITY_FACTOR, shown=text)
        if value in values:
            raise argparse.ArgumentTypeError(f"names {value:g} twice, in {text!r}")
        values.append(value)
    return tuple(values)


def load_imbalance(text: str) -> float:
    """--moe-load-imbalance F: the busiest expert-parallel rank's routed tokens over the mean, at least 1."""
    from autoplan.specs.validation import MAX_MOE_LOAD_IMBALANCE

    return _positive(text, ascii_float, "a load factor >= 1 (the busiest rank's routed tokens over the mean)",
                     upper=MAX_MOE_LOAD_IMBALANCE, lower=1.0)


def positive_int(text: str) -> int:
    return _positive(text, ascii_int, "a positive integer")


def int_at_most(upper: int, what: str):
    """A positive integer no larger than `upper` (a count; `what` names its unit in the message)."""
    def parse(text: str) -> int:
        value = positive_int(text)
        if value > upper:
            raise argparse.ArgumentTypeError(f"must be at most {upper:,} {what}, got {value:,}")
        return value
    parse.__name__ = "int"  # argparse names the type in its own messages
    return parse


def seed_int(text: str) -> int:
    try:
        value = ascii_int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer from 0 to {MAX_SEED}, got {text!r}") from None
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be an integer from 0 to {MAX_SEED}, got {value}")
    return value


def one_line_name(text: str) -> str:
    """A name that reaches a file, a study or a launch script (--name, --study-name): one line without
    control characters (autoplan.specs.validation.NAME_RULE)."""
    from autoplan.specs.validation import NAME_RULE, control_characters, show

    if control_characters(text):
        raise argparse.ArgumentTypeError(f"{NAME_RULE}, got {show(text)}")
    return text


def output_path(text: str) -> str:
    """A file to write, checked by the one writer's rules (autoplan.specs.output) before any work:
    - or /dev/stdout, or a regular file (new or not) in a writable folder."""
    from autoplan.specs import AutoplanError, check_output

    try:
        check_output(text)
    except AutoplanError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


# Where a parsed command line names the files it reads and writes (every command's spelling), so that
# one check before the command starts refuses an output that is also an input: `calibrate runs.jsonl
# -o runs.jsonl` would replace the measurements by their calibration, `tune plan.json --records
# plan.json` append a measurement to the plan.
INPUT_FLAGS = ("plan", "plans", "model", "profile", "calibration", "measurements", "compare", "data", "inputs")
OUTPUT_FLAGS = {"output": "-o/--output", "out": "-o/--output", "calibration_out": "--calibration-out",
                "records": "--records"}
FOLDER_OUTPUTS = {"report"}
"""Commands whose -o is a folder they fill (the one writer's folder rules: check_output_folder)."""


def input_paths(args) -> list:
    """The existing files among the command's inputs (a catalog model name is not a file), and the
    files those name: a plan file's profile, a profile's raw samples, a --model folder's config.json.
    `estimate plan.json -o cpu-profile.json` would otherwise replace the profile the plan is scored with."""
    found = []
    for name in INPUT_FLAGS:
        value = getattr(args, name, None)
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, str) and item and "\x00" not in item and os.path.exists(item):
                found.append(item)
    for item in list(found):
        found += named_inputs(item)
    return found


def named_inputs(path: str) -> list:
    """The files an input names, which a command reads through it: config.json in a model folder; the
    profile a plan's cluster names (found as cluster_for_plan_file finds it) and the raw samples CSV a
    profile names beside itself. Best effort: an unreadable input is the reader's to refuse later."""
    folder = Path(path)
    if folder.is_dir():
        return [str(folder / "config.json")] if (folder / "config.json").is_file() else []
    data = _small_json(folder)
    named = []
    profile = data.get("cluster", {}).get("profile") if isinstance(data.get("cluster"), dict) else None
    if isinstance(profile, str) and profile and not profile.startswith("builtin:") and "\x00" not in profile:
        candidate = Path(profile) if Path(profile).exists() else folder.parent / Path(profile).name
        if candidate.is_file():
            named.append(str(candidate))
            data = _small_json(candidate)
            folder = candidate
    samples = data.get("raw_samples")
    if isinstance(samples, str) and samples and "\x00" not in samples and (folder.parent / samples).is_file():
        named.append(str(folder.parent / samples))
    return named


def _small_json(path: Path) -> dict:
    """A JSON object read for the names it holds; {} for anything else (not JSON, too big, a FIFO)."""
    import json
    import stat

    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_NAMED_INPUT_BYTES:
            return {}
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


MAX_NAMED_INPUT_BYTES = 16 * 2**20
"""A plan or profile read for the files it names: both are well under 1 MiB (MAX_JSON_BYTES bounds the real read)."""


def check_command_paths(args) -> None:
    """Every output of the command checked up front, against its inputs and the other outputs:
    before `tune`, `run` or `profile` train or measure for minutes, and before any command reads."""
    from autoplan.specs import AutoplanError, check_output, check_output_folder, is_stdout

    if getattr(args, "print_launch", None):
        return  # a printed launch script's -o is a path on the cluster
    inputs = input_paths(args)
    if getattr(args, "command", None) in FOLDER_OUTPUTS:
        check_output_folder(args.output, inputs, "-o/--output")
        return
    seen = []
    for name, flag in OUTPUT_FLAGS.items():
        value = getattr(args, name, None)
        if not isinstance(value, str) or not value:
            continue
        appended = name == "records" or (name == "out" and getattr(args, "command", None) == "run")
        check_output(value, inputs, flag, "runs.jsonl" if appended else "out.json")
        for other_flag, other in seen:
            if is_stdout(value) and is_stdout(other):
                raise AutoplanError(f"{flag} and {other_flag} both write to standard output ({value!r} and "
                                    f"{other!r}); give one of them a file")
            if not is_stdout(value) and not is_stdout(other) and \
                    Path(value).expanduser().resolve() == Path(other).expanduser().resolve():
                raise AutoplanError(f"{flag} and {other_flag} are the same file {value!r}; give each its own")
        seen.append((flag, value))


TOKEN_SUFFIXES = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}


def _amount(text: str, what: str, upper: float, currency: bool = False) -> float:
    """A number with an optional base-10 suffix (K, M, B/G, T) and, for money, a leading $. One
    documented form: no thousands separators, since "1,5M" means 1.5M in half the world and 15M in the
    other half."""
    raw = text.strip().upper()
    raw = raw[1:] if currency and raw.startswith("$") else raw
    if "," in raw:
        raise argparse.ArgumentTypeError(f"must be {what} without thousands separators or decimal commas, got "
                                         f"{text!r}")
    scale = TOKEN_SUFFIXES.get(raw[-1:], 1.0)
    number = raw[:-1] if raw[-1:] in TOKEN_SUFFIXES else raw
    return _positive(number, lambda t: ascii_float(t) * scale, what, upper, shown=text)


def token_count(text: str) -> float:
    """--train-tokens: 2e12, 2T, 300B, 15M (base 10), at most MAX_TRAIN_TOKENS."""
    tokens = _amount(text, "a token count such as 2e12, 2T or 300B", MAX_TRAIN_TOKENS)
    if tokens < MIN_TRAIN_TOKENS:
        raise argparse.ArgumentTypeError(f"{text.strip()} tokens is far less than any training run (one optimizer "
                                         f"step of the default batch is ~4M tokens); give the run's tokens such as "
                                         f"2T or 300B")
    return tokens


def price(text: str) -> float:
    """--gpu-hour-price: a positive amount per GPU-hour."""
    return _positive(text.strip(), ascii_float, "a positive price per GPU-hour in USD such as 2.50", MAX_GPU_HOUR_PRICE)


def memory_headroom(text: str):
    """--memory-headroom: 2GiB, 512MiB, 3GB, 10% (autoplan.specs.headroom); resolved against the
    GPU's capacity once the profile is known. A bare number other than 0 is refused: read as GiB it
    silently gives a user who meant a percentage another plan (issue 53)."""
    from autoplan.specs import AutoplanError, parse_headroom

    try:
        bare = float(text)  # a number without a unit: GiB to one user, a percentage to another
    except ValueError:
        bare = None
    if bare is not None and math.isfinite(bare) and bare > 0:
        raise argparse.ArgumentTypeError(f"{text.strip()} has no unit: {text.strip()}GiB or {text.strip()}%? "
                                         f"write the unit (0 alone means no headroom)")
    try:
        return parse_headroom(text)
    except AutoplanError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--memory-headroom ")) from None


def add_memory_headroom(group) -> None:
    """The --memory-headroom flag, one help text for every command that judges "fits"."""
    group.add_argument("--memory-headroom", type=memory_headroom, default=None, metavar="SIZE|PCT",
                       help="GPU memory to keep free: a plan fits when its peak <= capacity - headroom; a size "
                            "(2GiB, 512MiB, 3GB) or a share of the capacity (10%%), with its unit (default: 0, the peak already "
                            "counts the CUDA context and allocator overhead; a plan file: its own)")


def check_storage_url(url: str) -> str:
    """An Optuna storage URL that SQLAlchemy can parse and, for SQLite, whose folder exists; returned
    with a SQLite file's `~` expanded (sqlite:///~/s.db: SQLite itself would look for a folder "~")."""
    from autoplan.specs import AutoplanError

    if not url.strip():
        raise AutoplanError("--storage is empty; give a database URL such as sqlite:///plans.db")
    try:
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError
    except ImportError:  # Optuna will say what it needs
        return url
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise AutoplanError(f"--storage {url!r} is not a database URL; use e.g. sqlite:///plans.db "
                            f"(a file next to you) or postgresql://user@host/db") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        database = Path(parsed.database).expanduser()
        if not database.parent.is_dir():
            raise AutoplanError(f"--storage {url!r}: the folder {str(database.parent)!r} does not exist; create it "
                                f"or point the URL at an existing folder")
        if str(database) != parsed.database:
            return parsed.set(database=str(database)).render_as_string(hide_password=False)
    return url


def framework_name(text: str) -> str:
    """--framework: a built-in framework's name (one line listing them otherwise)."""
    from autoplan.specs import AutoplanError, get_framework

    try:
        return get_framework(text).name
    except AutoplanError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None



def days(text: str) -> float:
    """--deadline-days: a positive number of days, whole or not, at most MAX_DAYS."""
    try:
        past = ascii_float(text.strip()) <= 0
    except (ValueError, OverflowError):
        past = False
    if past:
        raise argparse.ArgumentTypeError(f"a deadline of {text.strip()} days from now is already past; give the days "
                                         f"the run may take, such as 30 or 7.5")
    return _positive(text.strip(), ascii_float, "a positive number of days such as 30 or 7.5", MAX_DAYS, lower=MIN_DAYS)


def money(text: str) -> float:
    """--budget: a positive amount, e.g. 1500000, 1.5M, $250K (suffixes base 10), at most MAX_BUDGET."""
    return _amount(text, "a positive amount in USD such as 1500000, 1.5M or $250K", MAX_BUDGET, currency=True)


def gpu_hour_prices(text: str):
    """--gpu-hour-price for `cluster`: one price for every type (2.50), or TYPE=PRICE,TYPE=PRICE."""
    if "=" not in text:
        return price(text)
    prices = {}
    for item in text.split(","):
        name, sep, amount = item.partition("=")
        name = name.strip().lower()
        if not sep or not name:
            raise argparse.ArgumentTypeError(f"must be TYPE=PRICE,TYPE=PRICE (e.g. h100-80gb=2.5,a100-80gb=1.6) or "
                                             f"one price, got {text!r}")
        if name in prices:
            raise argparse.ArgumentTypeError(f"names {name} twice, in {text!r}")
        prices[name] = price(amount)
    return prices
