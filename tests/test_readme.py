"""The README's quick tour works as written: each command of its block, run by bash in a fresh directory with the
checkout's `.venv` activated exactly as the block says, ends without a traceback and with the code it should."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _quick_tour() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick tour", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "the quick tour has a sh block"
    commands, current = [], ""
    for line in block.group(1).splitlines():
        code = re.sub(r"\s+#.*$", "", line).rstrip()  # trailing comments, as the shell drops them
        current += code[:-1] + " " if code.endswith("\\") else code
        if not code.endswith("\\"):
            if current.strip():
                commands.append(current.strip())
            current = ""
    return commands


def test_the_quick_tour_block_is_found_and_starts_by_activating_the_venv():
    commands = _quick_tour()
    assert commands[0] == ". .venv/bin/activate" and len(commands) >= 5


@pytest.mark.slow
def test_the_quick_tour_runs_as_written(tmp_path):
    venv = ROOT / ".venv"
    if not (venv / "bin" / "txnadmin").exists():
        pytest.skip("no .venv in the checkout (make install first)")
    (tmp_path / ".venv").symlink_to(venv)  # a fresh directory beside the checkout's environment
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TXNADMIN_", "PULSAR_", "VIRTUAL_ENV"))}
    env["PATH"] = "/usr/bin:/bin"  # no txnadmin on PATH until the block activates .venv
    env["TXNADMIN_HOME"] = str(tmp_path / "home")
    commands = _quick_tour()
    activate = commands[0]
    for command in commands[1:]:
        done = subprocess.run(["bash", "-c", f"{activate} && {command}"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=180, stdin=subprocess.DEVNULL)
        assert "Traceback" not in done.stdout + done.stderr, (command, done.stderr)
        # find-hanging with timeout 0 finds the workload's open transactions, if any: pulsar-admin style exit 1
        allowed = (0, 1) if "find-hanging" in command else (0,)
        assert done.returncode in allowed, (command, done.returncode, done.stdout[-2000:], done.stderr[-2000:])
        assert done.stdout.strip(), (command, "prints nothing")


@pytest.mark.parametrize("verdict", [0, 1])
def test_make_run_prints_next_steps_and_removes_its_rehearsal_directory(tmp_path, verdict):
    """`make run`'s own steps, around a stand-in for the rehearsal (the real one is tested in test_rehearse.py): the
    rehearsal alone says where its files went (`--discard`: removed), once, on its verdict line; make adds no second
    word about them, and the comments of its next steps line up."""
    import shutil

    if not shutil.which("make"):
        pytest.skip("no make")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    seen = tmp_path / "rehearsal-dir"
    fake = venv / "bin" / "txnadmin"
    fake.write_text("#!/bin/sh\n"
                    '[ "$1" = rehearse ] && [ "$2" = --discard ] || exit 9\n'
                    f'dir=$(mktemp -d) && echo data > "$dir/entries.log" && echo "$dir" > {seen}\n'
                    f"echo 'verdict: rehearsed'\nexit {verdict}\n")
    fake.chmod(0o755)
    for stamp in (".created", ".installed"):
        (venv / stamp).touch()  # installed already: make goes straight to the run
    done = subprocess.run(["make", "-s", "-C", str(ROOT), "run", f"VENV={venv}"], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "JAVA_HOME": os.environ.get("JAVA_HOME", "")})
    assert (done.returncode == 0) == (verdict == 0), done.stderr
    rehearsal = Path(seen.read_text().strip())
    assert not rehearsal.exists() and not rehearsal.parent.exists()  # a killed rehearsal's files go with make's TMPDIR
    lines = done.stdout.splitlines()
    assert lines[0] == "verdict: rehearsed"
    own = lines[1:]  # make's own words, after the rehearsal's
    assert not any("rehears" in line or "removed" in line or "director" in line for line in own), own
    steps = own[own.index("next steps:") + 1:]
    assert len(steps) == 3 and steps[0].startswith(f"  . {venv}/bin/activate ")
    assert len({line.index(" # ") for line in steps}) == 1, steps  # one column for the comments
