"""docs/slurm.md as a Slurm user follows it: ``horizon up --nodes 4 --gpus-per-node 8`` from a folder
of theirs (relative default data dir), a first batch script written from the doc and submitted from
a project folder, its output file where Slurm would put it, the doc's sample outputs checked against
what the commands print (their header lines as written, their rows in the same shape: the doc's
made-up ids, times and node names stand for real ones), and the commands under Slurm's own names
through ``horizon slurm-shims``, on a machine with no Slurm of its own."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator, Mapping, Sequence

import pytest

from tests.journeys.conftest import Up, start_up, submitted_id, wait_state
from tests.journeys.docblocks import Block, block
from tests.journeys.person import Person

SLURM_COMMANDS = ("sbatch", "squeue", "scancel", "sinfo", "sacct", "srun", "scontrol")
# The doc's made-up job ids (ann's): each one in the shape Horizon gives ids, <user>-<date>-<time>-<6 hex>
DOC_ID = re.compile(r"\b[a-z]+-\d{8}-\d{6}-[0-9a-f]+\b")
REAL_ID = r"[A-Za-z0-9_.]+-\d{8}-\d{6}-[0-9a-f]{6}"
# The doc's made-up job numbers (Slurm's job ids, which sbatch prints and the samples show): the real
# ones replace them in the commands typed; in sample output any number stands for any
FIRST_ID, SECOND_ID = "4213", "4214"
_PIECES = re.compile(rf"(?P<id>{DOC_ID.pattern})|(?P<nodes>node-(?:\d+|\[[\d,-]+\]))|(?P<digits>\d+)|(?P<rule>-{{3,}})")


# ---------------------------------------------------------------- the doc's samples against real output


def _pattern(shown: str, words: Mapping[str, str]) -> str:
    """A field of the doc's sample as a pattern: its ids, node names and numbers stand for any."""
    if shown in words:
        return words[shown]
    out, at = [], 0
    for piece in _PIECES.finditer(shown):
        out.append(re.escape(shown[at:piece.start()]))
        kind = piece.lastgroup
        out.append({"id": REAL_ID, "nodes": r"node-(?:\d+|\[[\d,-]+\])", "digits": r"\d+", "rule": "-+"}[kind or ""])
        at = piece.end()
    return "".join(out) + re.escape(shown[at:])


def _fields(line: str) -> list[str]:
    return line.split("|") if "|" in line else line.split()


def shaped_like(shown: str, real: str, words: Mapping[str, str] | None = None) -> bool:
    a, b = _fields(shown), _fields(real)
    return len(a) == len(b) and all(re.fullmatch(_pattern(x, words or {}), y) for x, y in zip(a, b))


def check_header(shown: Sequence[str], real: str) -> list[str]:
    """The doc's first line of output is the real one (fields alike, spacing aside); the real lines."""
    lines = [line for line in real.splitlines() if line.strip()]
    assert lines and _fields(lines[0]) == _fields(shown[0]), f"the doc's header:\n{shown[0]}\nthe real output:\n{real}"
    return lines


def check_sample(person: Person, shown: Sequence[str], real: str, *, words: Mapping[str, str] | None = None,
                 header: bool = True) -> None:
    """The doc's sample output against the real one: the doc's ids are in the shape Horizon gives ids,
    its header (first line) is the real one, and every real line has the shape of one of the doc's."""
    for made_up in DOC_ID.findall("\n".join(shown)):
        assert re.fullmatch(REAL_ID, made_up), f"the doc's job id {made_up!r} is not in the shape Horizon gives ids"
    shown = [person.typed(line) for line in shown if line.strip()]
    lines = check_header(shown, real) if header else [line for line in real.splitlines() if line.strip()]
    assert lines, f"no output where the doc shows:\n{chr(10).join(shown)}"
    for line in lines:
        assert any(shaped_like(s, line, words) for s in shown), (
            f"a line in no shape the doc shows:\n{line}\nthe doc shows:\n" + "\n".join(shown))


def test_the_shape_check_holds_the_doc_to_real_output(tmp_path) -> None:  # type: ignore[no-untyped-def]
    person = Person(tmp_path, tmp_path)
    assert shaped_like("ann-20240310-153000-ab12cd      main    train      ann  R      12:05      2 node-[00-01]",
                       "root-20261128-142905-941899 main train root R 0:03 2 node-[02-03]", {"ann": r"\S+"})
    assert not shaped_like("x|COMPLETED|0:0", "x|FAILED|0:0")
    with pytest.raises(AssertionError, match="not in the shape"):  # an id of 4 hex digits, as the doc once had
        check_sample(person, ["Submitted batch job ann-20260101-120000-1a2b"],
                     "Submitted batch job root-20261128-142905-941899", header=False)


# ---------------------------------------------------------------- the journey


@pytest.fixture(scope="module")
def cluster(someone: Person) -> Iterator[Up]:
    """The doc's `horizon up`, from a folder of the person's; everything else from their project."""
    up = start_up(someone, block("slurm-up").commands[0].text, cwd=someone.folder("cluster"))
    someone.cwd = someone.folder("project")
    yield up
    up.bg.interrupt()


def _save(person: Person, name: str, script: Block) -> None:
    """The person saves the doc's script under the name the doc gives it."""
    (person.cwd / name).write_text(script.body + "\n")


def test_a_first_batch_script(cluster: Up, someone: Person) -> None:
    """The acceptance: `#SBATCH --output=%x-%j.out` writes hello-<id>.out into the submit folder,
    not where `horizon up` runs."""
    _save(someone, "hello.sh", block("slurm-hello-script"))
    commands = block("slurm-hello-commands").commands
    first = someone.run(commands[0])  # horizon sbatch hello.sh
    check_sample(someone, commands[0].shown, first.out, header=False)
    someone.subs[FIRST_ID] = job = submitted_id(first)
    for command in commands[1:]:
        text = someone.typed(command)
        if text.startswith("horizon sbatch"):
            submitted = someone.run(command)
            check_sample(someone, command.shown, submitted.out, header=False)
            someone.subs[SECOND_ID] = submitted_id(submitted)
            continue
        if text.startswith("horizon squeue"):  # the job may have ended: the header, and a running row's shape
            lines = check_header(command.shown, someone.run(command).out)
            running = [line for line in lines[1:] if line.split()[4:5] == ["R"]]
            assert all(shaped_like(someone.typed(command.shown[1]), line, {"ann": r"\S+"}) for line in running), lines
            continue
        if text.startswith("horizon scancel"):
            wait_state(someone, someone.subs[SECOND_ID], "RUNNING")
            cancelled = someone.run(command)
            assert cancelled.out == "" and cancelled.err == "", cancelled  # as scancel: nothing when it succeeds
            continue
        if text.startswith("horizon sacct"):  # what a person does: again, until the job has ended
            ended = someone.until(command, lambda r: r.rc == 0 and re.search(r"\b(COMPLETED|CANCELLED|FAILED)\b", r.out)
                                  is not None and "RUNNING" not in r.out)
            check_sample(someone, command.shown, ended.out)
            continue
        if text.startswith("cat "):
            out = someone.cwd / f"hello-{job}.out"
            assert out.is_file(), f"no {out.name} in the submit folder: {sorted(p.name for p in someone.cwd.iterdir())}"
            assert not list(someone.folder("cluster").glob("hello-*")), "the output went where horizon up runs"
            shown = someone.run(command).out.splitlines()
            # the batch script's line, then srun -l's, one per task in whatever order they came
            real = shown[:1] + sorted(shown[1:])
            assert len(real) == len(command.shown), (command.shown, shown)
            for doc_line, line in zip(command.shown, real):
                assert shaped_like(doc_line, line), (doc_line, line)
            continue
        raise AssertionError(f"the journey does not know what to expect of {text!r}")
    assert wait_state(someone, job, "SUCCEEDED", "FAILED") == "SUCCEEDED"


def test_a_script_s_problems_and_warnings_as_shown(cluster: Up, someone: Person) -> None:
    """legacy.sh: every problem at once, each with its line; nightly.sh: a warning a line, submitted."""
    _save(someone, "legacy.sh", block("slurm-legacy-script"))
    [refused] = block("slurm-legacy-sbatch").commands
    done = someone.run(refused, ok=False)
    assert done.rc == 1 and done.out == "", done
    assert done.err.splitlines() == [line for line in refused.shown if line], done

    _save(someone, "nightly.sh", block("slurm-nightly-script"))
    [warned] = block("slurm-nightly-sbatch").commands
    done = someone.run(warned)
    shown = [line for line in warned.shown if line]
    warnings = [line for line in shown if line.startswith("horizon sbatch: warning")]
    assert done.err.splitlines() == warnings, done
    check_sample(someone, [line for line in shown if line not in warnings], done.out, header=False)
    assert wait_state(someone, submitted_id(done), "SUCCEEDED", "FAILED") == "SUCCEEDED"


def test_the_commands_under_their_own_names(cluster: Up, someone: Person) -> None:
    """`eval "$(horizon slurm-shims ~/.horizon/bin)"`, then Slurm's names as the doc types them: its
    sbatch, squeue, sacct and sinfo samples run against a cluster in the state the samples show."""
    commands = block("slurm-shims").commands
    if any(shutil.which(name) for name in SLURM_COMMANDS):
        # A machine with Slurm installed (CI installs slurm-wlm for the backend's tests): the doc's
        # first rule, refused and said; nothing written
        refused = someone.run(commands[0].text.split("#")[0].replace('eval "$(', "").rstrip(')" '), ok=False)
        assert "a Slurm is installed here (sbatch at " in refused.err, refused
        assert not (someone.home / ".horizon" / "bin" / "sbatch").exists()
        someone.without(*SLURM_COMMANDS)  # the person the section is for: no Slurm on this machine
    someone.adopt(commands[0])
    assert someone.run("command -v sbatch").out.strip() == str(someone.home / ".horizon" / "bin" / "sbatch")

    parsable = someone.run(commands[1])  # sbatch --parsable hello.sh
    check_sample(someone, commands[1].shown, parsable.out, header=False)
    someone.subs[FIRST_ID] = job = parsable.out.strip()
    check_header(block("slurm-squeue-sample").commands[0].shown, someone.run(commands[2]).out)  # squeue --me
    wait_state(someone, job, "SUCCEEDED")
    assert someone.run(commands[3]).out.splitlines() == [someone.typed(line) for line in commands[3].shown if line]
    [one_line] = block("slurm-sacct-one-line").commands
    assert someone.run(one_line).out.splitlines() == [someone.typed(line) for line in one_line.shown if line]
    [steps] = block("slurm-sacct-steps").commands  # the doc's is a ddp.sh with two steps, one failed
    check_sample(someone, steps.shown, someone.run(steps).out, words={"ddp.sh": "hello", "python": "bash"})

    # the squeue sample's cluster: train running on two nodes, sweep waiting for GPUs (the other two
    # nodes taken); and the sinfo sample's, with the gpu partition's time limit as an operator set it
    someone.subs[FIRST_ID] = submitted_id(someone.run('sbatch -J train -N 2 --gres=gpu:8 --wrap "sleep 600"'))
    someone.run('sbatch -J fill -N 2 --gres=gpu:6 --wrap "sleep 600"')
    someone.subs[SECOND_ID] = submitted_id(someone.run('sbatch -J sweep --gres=gpu:4 --wrap "sleep 600"'))
    wait_state(someone, someone.subs[FIRST_ID], "RUNNING")
    [squeue] = block("slurm-squeue-sample").commands
    someone.until(squeue, lambda r: "sweep" in r.out and "(" in r.out)
    check_sample(someone, squeue.shown, someone.run(squeue).out, words={"ann": r"\S+", "train": "train|fill"})
    someone.run("horizon partition set gpu --max-time 2-00:00:00")
    [sinfo] = block("slurm-sinfo-sample").commands
    someone.until(sinfo, lambda r: "2-00:00:00" in r.out)
    states = r"(?:idle|mix|alloc)"
    check_sample(someone, sinfo.shown, someone.run(sinfo).out, words={"mix": states, "idle": states})
    someone.run("scancel --me")

    removed = someone.run(commands[4])
    assert "removed 7 shim(s)" in removed.out + removed.err, removed
    assert not (someone.home / ".horizon" / "bin" / "sbatch").exists()


def test_sbatch_gives_the_job_your_environment(cluster: Up, someone: Person) -> None:
    """issue 34's acceptance under Slurm's names: `sbatch` in a shell with FOO=bar, the job sees FOO=bar;
    with --export=NONE it does not; SBATCH_ACCOUNT stands for -A (docs/slurm.md, "The job's environment")."""
    shims = block("slurm-shims").commands
    if any(shutil.which(name) for name in SLURM_COMMANDS):
        someone.without(*SLURM_COMMANDS)  # as above: the person has no Slurm of their own
    someone.adopt(shims[0])
    try:
        for command in block("slurm-export").commands:
            text = someone.typed(command)
            if text.startswith("export "):
                someone.adopt(command)
            elif text.startswith("cat "):
                assert someone.run(command).out.splitlines() == [line for line in command.shown if line]
            else:  # sbatch --wait: submitted, and ended well
                done = someone.run(command)
                assert re.fullmatch(r"Submitted batch job \S+\n", done.out), done
    finally:
        someone.run(shims[4])  # horizon slurm-shims --remove
