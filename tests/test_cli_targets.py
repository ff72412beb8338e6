"""Naming the target (issue #26, points 3–5): printed commands paste onto the same target and checklist, an implicit
target is named on a terminal, contexts as pulsarctl keeps them, -u/--conf after `transactions`, --txn-id as logs
print it, and --token among the global auth options."""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from txnadmin.cli._common import JAVA_LONG, parse_txn_id
from txnadmin.cli.main import app

from engine_helpers import open_engine
from downgrade_helpers import BATCHED, traffic

runner = CliRunner()
TXNADMIN = [sys.executable, "-m", "txnadmin"]
TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"


def _env(tmp_path) -> dict:
    """A home of its own, with an embedded default engine in it: a pasted command that lost its target acts there."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TXNADMIN_ADMIN_URL", "PULSAR_CLIENT_CONF", "PULSAR_HOME", "TXNADMIN_TOKEN",
                        "TXNADMIN_ENGINE_DIR")}
    env.update(TXNADMIN_HOME=str(tmp_path / "home" / ".txnadmin"), HOME=str(tmp_path / "home"), COLUMNS="400")
    return env


def _decoy(env) -> None:
    """The embedded default engine exists (a pasted command without its target would quietly act on it)."""
    result = runner.invoke(app, ["engine", "init", os.path.join(env["TXNADMIN_HOME"], "engine"), "-c", "1"], env=env)
    assert result.exit_code == 0, result.output


def _paste(line: str, env: dict, *extra: str) -> subprocess.CompletedProcess:
    """Run a printed command line as an operator would paste it."""
    argv = shlex.split(line)
    assert argv[0] == "txnadmin", line
    return subprocess.run(TXNADMIN + argv[1:] + list(extra), env=env, capture_output=True, text=True, timeout=120)


def _pinned_engine(tmp_path):
    """An engine whose coordinator log 0 is pinned by an open transaction, its downgrade recorded."""
    from txnadmin.admin.local import LocalAdmin
    from txnadmin.procedures.downgrade import start

    d = tmp_path / "e"
    state = tmp_path / "checks" / "my-checklist.json"
    state.parent.mkdir()
    with open_engine(d, **BATCHED) as engine:
        pinned = engine.begin(3_600_000, tc_id=0, owner="stuck-app")
        traffic(engine, 30)
        start(LocalAdmin(engine), state, f"local:{d}")
        traffic(engine, 40)
    return d, state, pinned


# -- 3. every printed next-command pastes and acts on the same target and checklist ---------------------------------

@pytest.mark.slow
def test_start_next_lines_and_the_status_abort_suggestion_paste_onto_the_same_target(tmp_path):
    env = _env(tmp_path)
    _decoy(env)
    d, state, pinned = _pinned_engine(tmp_path)
    started = runner.invoke(app, ["downgrade", "start", "-u", f"local:{d}", "--state", str(state), "--yes"], env=env)
    assert started.exit_code == 0, started.output
    hints = re.findall(r"^(?:next|  or): (txnadmin .*)$", started.stdout, flags=re.M)
    assert len(hints) == 2, started.stdout
    for line in hints:
        assert f"-u local:{d}" in line and f"--state {state}" in line, line
        ran = _paste(line, env, "--timeout", "0") if " wait " in line else _paste(line, env)
        assert ran.returncode == 1, (line, ran.stdout, ran.stderr)  # not yet: the log is pinned
        assert f"target: local:{d} (from --admin-url)" in ran.stdout, ran.stdout
        assert "no recorded downgrade" not in ran.stderr
    status = runner.invoke(app, ["downgrade", "status", "-u", f"local:{d}", "--state", str(state), "-o", "json"],
                           env=env)
    (log,) = [x for x in json.loads(status.stdout)["components"] if x.get("pinnedBy")]
    assert log["suggestion"].startswith(f"txnadmin -u local:{d} transactions abort-transaction"), log
    metadata = ["-u", f"local:{d}", "transactions", "transaction-metadata", "--txn-id", f"{pinned[0]}:{pinned[1]}",
                "-o", "json"]
    assert json.loads(runner.invoke(app, metadata, env=env).stdout)["status"] == "OPEN"
    aborted = _paste(log["suggestion"], env)
    assert aborted.returncode == 0, aborted.stderr
    meta = runner.invoke(app, metadata, env=env)
    assert meta.exit_code == 1 and "not found" in meta.stderr, meta.output  # ended: the coordinator forgot it


@pytest.mark.slow
def test_a_context_is_carried_by_the_hints_and_the_resume_line_names_target_and_checklist(tmp_path):
    env = _env(tmp_path)
    _decoy(env)
    d, state, pinned = _pinned_engine(tmp_path)
    assert runner.invoke(app, ["context", "add", "staging", "-u", f"local:{d}"], env=env).exit_code == 0
    status = runner.invoke(app, ["downgrade", "status", "--context", "staging", "--state", str(state), "-o", "json"],
                           env=env)
    (log,) = [x for x in json.loads(status.stdout)["components"] if x.get("pinnedBy")]
    assert log["suggestion"].startswith("txnadmin --context staging transactions abort-transaction"), log
    assert _paste(log["suggestion"], env).returncode == 0
    # an error's suggested command carries them too: a checklist of another target
    other = tmp_path / "other"
    assert runner.invoke(app, ["engine", "init", str(other), "-c", "2"], env=env).exit_code == 0
    refused = runner.invoke(app, ["downgrade", "status", "-u", f"local:{other}", "--state", str(state)], env=env)
    assert refused.exit_code == 3
    (reset,) = re.findall(r"`(txnadmin [^`]*downgrade reset[^`]*)`", refused.stderr)
    assert reset == f"txnadmin -u local:{other} downgrade reset --state {state}"


@pytest.mark.slow
def test_ctrl_c_resume_line_pastes_onto_the_same_target_and_checklist(tmp_path):
    import signal

    from downgrade_helpers import running

    env = _env(tmp_path)
    _decoy(env)
    d, state, _ = _pinned_engine(tmp_path)
    with running(d):
        proc = subprocess.Popen(TXNADMIN + ["downgrade", "wait", "-u", f"local:{d}", "--state", str(state),
                                            "--interval", "0.5", "--timeout", "60"],
                                env=dict(env, TXNADMIN_HEARTBEAT_S="0.5"), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        first = proc.stderr.readline()  # the first poll's line: the wait is under way
        assert "logs done" in first, first
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        (line,) = re.findall(r"resume with the same command: `(txnadmin [^`]*)`", err)
        # the command as given (issue #34: the --interval and --timeout given were dropped before)
        assert line == f"txnadmin -u local:{d} downgrade wait --state {state} --timeout 60 --interval 0.5"
        again = _paste(line.replace("--timeout 60", "--timeout 0"), env)
        assert again.returncode == 1 and f"target: local:{d} (from --admin-url)" in again.stdout, again.stderr


def test_doctor_fix_texts_name_the_target_again(tmp_path):
    env = _env(tmp_path)
    d = tmp_path / "e"
    assert runner.invoke(app, ["engine", "init", str(d), "-c", "1"], env=env).exit_code == 0
    assert runner.invoke(app, ["context", "add", "lab", "-u", f"local:{d}"], env=env).exit_code == 0
    result = runner.invoke(app, ["doctor", "--context", "lab", "-o", "json"], env=env)
    suggested = [m for f in json.loads(result.stdout)["findings"] for m in re.findall(r"txnadmin [^`]*", f["fix"])]
    assert suggested, result.stdout
    assert all(m.startswith("txnadmin --context lab ") for m in suggested), suggested


# -- 4. name the target, always -------------------------------------------------------------------------------------

def _on_a_terminal(args, env) -> tuple[bytes, bytes, int]:
    """stdout to a pipe, stderr to a pseudo-terminal: what an operator piping the output sees on the screen."""
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen(TXNADMIN + args, env=env, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    screen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        screen += chunk
    out = proc.stdout.read() if proc.stdout else b""
    proc.wait(timeout=60)
    os.close(master)
    return out, screen, proc.returncode


@pytest.mark.slow
def test_an_implicit_target_is_named_on_a_terminal_and_stdout_stays_pulsar_admins(tmp_path):
    env = _env(tmp_path)
    _decoy(env)
    engine_dir = os.path.join(env["TXNADMIN_HOME"], "engine")
    piped = subprocess.run(TXNADMIN + ["transactions", "coordinators-list"], env=env, capture_output=True)
    out, screen, code = _on_a_terminal(["transactions", "coordinators-list"], env)
    assert code == 0 and out == piped.stdout == b"0    pulsar://127.0.0.1:6650\n"
    assert f"target: local:{engine_dir} (from embedded default)".encode() in screen, screen
    assert b"target:" not in piped.stderr  # not on a pipe
    _, named_screen, _ = _on_a_terminal(["-u", f"local:{engine_dir}", "transactions", "coordinators-list"], env)
    assert b"target:" not in named_screen  # named on the command line: nothing to add
    assert runner.invoke(app, ["context", "add", "dev", "-u", f"local:{engine_dir}", "--use"], env=env).exit_code == 0
    _, current, _ = _on_a_terminal(["transactions", "coordinators-list"], env)
    assert b"(from current context dev (txnadmin context use))" in current, current


def test_no_default_engine_says_first_how_to_name_a_cluster(tmp_path):
    result = runner.invoke(app, ["transactions", "coordinators-list"], env=_env(tmp_path))
    assert result.exit_code == 1
    first = result.stderr.splitlines()[0]
    for word in ("-u", "--conf", "PULSAR_CLIENT_CONF", "engine init"):
        assert word in first, first
    assert first.index("PULSAR_CLIENT_CONF") < first.index("engine init")


def test_abort_transaction_refuses_an_implicit_target(tmp_path):
    env = _env(tmp_path)
    _decoy(env)
    engine_dir = os.path.join(env["TXNADMIN_HOME"], "engine")
    for implicit in ([], ["context", "add", "dev", "-u", f"local:{engine_dir}", "--use"]):
        if implicit:
            assert runner.invoke(app, implicit, env=env).exit_code == 0
        refused = runner.invoke(app, ["transactions", "abort-transaction", "--txn-id", "(0,1)"], env=env)
        assert refused.exit_code == 1 and "needs a named target" in refused.stderr, refused.output
    hanging = runner.invoke(app, ["transactions", "find-hanging", "--abort", "--dry-run"], env=env)
    assert hanging.exit_code == 1 and "needs a named target" in hanging.stderr, hanging.output
    named = runner.invoke(app, ["transactions", "abort-transaction", "--context", "dev", "--txn-id", "0:1"], env=env)
    assert "needs a named target" not in named.stderr and "(0,1)" in named.stderr  # reached the engine: not found


@pytest.mark.slow
def test_contexts_are_kept_private_and_follow_the_documented_precedence(tmp_path):
    env = _env(tmp_path)
    secret = "s3cret-token-value"
    added = runner.invoke(app, ["context", "add", "prod", "-u", "http://127.0.0.1:9", "--auth-plugin", TOKEN_PLUGIN,
                                "--auth-params", f"token:{secret}"], env=env)
    assert added.exit_code == 0, added.output
    file = tmp_path / "home" / ".txnadmin" / "contexts.json"
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert runner.invoke(app, ["context", "add", "lab", "-u", "http://127.0.0.1:10"], env=env).exit_code == 0
    taken = runner.invoke(app, ["context", "add", "lab", "-u", "http://127.0.0.1:11"], env=env)
    assert taken.exit_code == 2 and "--replace" in taken.stderr
    for args in (["context", "list"], ["context", "list", "-o", "json"], ["context", "show", "prod"],
                 ["--context", "prod", "target"]):
        shown = runner.invoke(app, args, env=env)
        assert shown.exit_code == 0 and secret not in shown.output and "prod" in shown.output, (args, shown.output)

    def source(*args, **extra):
        result = runner.invoke(app, [*args, "target", "-o", "json"], env=dict(env, **extra))
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)["source"], json.loads(result.stdout)["named"]

    conf = tmp_path / "client.conf"
    conf.write_text("webServiceUrl=http://127.0.0.1:12\n")
    _decoy(env)  # `target` reports the embedded default as in use only when an engine is there
    assert source() == ("embedded default", False)
    assert runner.invoke(app, ["context", "use", "lab"], env=env).exit_code == 0
    assert source() == ("current context lab (txnadmin context use)", False)
    assert source(PULSAR_CLIENT_CONF=str(conf)) == (f"client.conf {conf} via $PULSAR_CLIENT_CONF", True)
    assert source(TXNADMIN_ADMIN_URL="http://127.0.0.1:13") == ("$TXNADMIN_ADMIN_URL", True)
    assert source("--context", "prod", TXNADMIN_ADMIN_URL="http://127.0.0.1:13") == ("--context prod", True)
    assert source("--conf", str(conf)) == (f"client.conf {conf} via --conf", True)
    assert source("-u", "http://127.0.0.1:14", PULSAR_CLIENT_CONF=str(conf)) == ("--admin-url", True)
    both = runner.invoke(app, ["--context", "prod", "-u", "http://127.0.0.1:14", "target"], env=env)
    assert both.exit_code == 2 and "give one of them" in both.stderr
    for command in (["target"], ["downgrade", "status"], ["doctor"]):
        unknown = runner.invoke(app, ["--context", "nope", *command], env=env)
        assert unknown.exit_code == 2 and "no context named 'nope'" in unknown.stderr, (command, unknown.output)
    # a change refuses the current context, and says how to name it
    change = runner.invoke(app, ["downgrade", "start", "--dry-run"], env=env)
    assert change.exit_code == 2 and "--context lab" in change.stderr
    file.write_text("{not json")
    broken = runner.invoke(app, ["transactions", "coordinators-list"], env=env)
    assert broken.exit_code == 1 and str(file) in broken.stderr and "Traceback" not in broken.output


def test_target_is_shown_when_its_credentials_cannot_be_read(tmp_path):
    env = _env(tmp_path)
    missing = tmp_path / "no-such-token"
    result = runner.invoke(app, ["-u", "http://127.0.0.1:9", "--auth-plugin", TOKEN_PLUGIN, "--auth-params",
                                 f"file://{missing}", "target"], env=env)
    assert result.exit_code == 3
    assert "target: http://127.0.0.1:9" in result.stdout and "credentials: UNREADABLE" in result.stdout
    assert str(missing) in result.stdout and len(result.stderr.strip().splitlines()) == 1
    conf = tmp_path / "unreadable.conf"
    conf.mkdir()  # unreadable as a file whoever runs the test (root reads a mode-0 file)
    shown = runner.invoke(app, ["-u", "http://127.0.0.1:9", "--conf", str(conf), "target", "-o", "json"], env=env)
    info = json.loads(shown.stdout)
    assert shown.exit_code == 3 and info["target"] == "http://127.0.0.1:9" and str(conf) in info["credentials"]


# -- 5. one way to say things ------------------------------------------------------------------------------------

def test_target_options_after_transactions_and_its_subcommand(tmp_path):
    env = _env(tmp_path)
    d = tmp_path / "e"
    assert runner.invoke(app, ["engine", "init", str(d), "-c", "2"], env=env).exit_code == 0
    before = runner.invoke(app, ["-u", f"local:{d}", "transactions", "coordinators-list"], env=env)
    assert before.exit_code == 0 and before.stdout.count("pulsar://") == 2
    for args in (["transactions", "coordinators-list", "-u", f"local:{d}"],
                 ["transactions", "-u", f"local:{d}", "coordinators-list"],
                 ["txn", "coordinators-list", f"--admin-url=local:{d}"],
                 ["-u", f"local:{d}", "transactions", "coordinators-list", "-u", f"local:{d}"]):
        after = runner.invoke(app, args, env=env)
        assert after.exit_code == 0 and after.stdout == before.stdout, (args, after.output)
    conf = tmp_path / "client.conf"
    conf.write_text("webServiceUrl=http://127.0.0.1:9\n")
    with_conf = runner.invoke(app, ["transactions", "coordinators-list", "--conf", str(conf)], env=env)
    assert with_conf.exit_code == 1 and "127.0.0.1:9" in with_conf.stderr  # it went where the conf says
    clash = subprocess.run(TXNADMIN + ["-u", f"local:{d}", "transactions", "coordinators-list", "-u",
                                       "local:/elsewhere"], env=env, capture_output=True, text=True, timeout=60)
    assert clash.returncode == 1 and "give it once" in clash.stderr, clash.stderr  # a usage error: pulsar-admin's 1


FORMS = [lambda m, lo: f"({m},{lo})", lambda m, lo: f"{m},{lo}", lambda m, lo: f"{m}:{lo}",
         lambda m, lo: f"TxnID({m},{lo})", lambda m, lo: f" TxnID( {m} , {lo} ) "]
LONGS = st.integers(min_value=JAVA_LONG[0], max_value=JAVA_LONG[1])


@settings(max_examples=300, deadline=None)
@given(LONGS, LONGS, st.sampled_from(FORMS))
def test_txn_id_reads_every_pasted_form(most, least, form):
    assert parse_txn_id(form(most, least)) == (most, least)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40) | st.from_regex(r"[\sTxnID(),:+\-0-9]{0,30}", fullmatch=True))
def test_txn_id_garbage_is_refused_in_one_line(text):
    try:
        most, least = parse_txn_id(text)
    except ValueError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("--txn-id ")
        return
    # what it accepted is one of the documented forms, read back the same way
    assert any(parse_txn_id(form(most, least)) == (most, least) for form in FORMS)
    assert re.fullmatch(r"\s*(TxnID\s*)?\(?\s*[+-]?\d+\s*[,:]\s*[+-]?\d+\s*\)?\s*", text, flags=re.I | re.A)


@pytest.mark.parametrize("text", ["", "(1,", "1;42", "TxnID[1,42]", "1,42,3", "(1,42", "x" * 300, "1:42)",
                                  "١:٢", f"{2 ** 64},1"])
def test_txn_id_garbage_through_the_cli_is_one_line_and_pulsar_admins_exit_1(tmp_path, text):
    result = runner.invoke(app, ["-u", f"local:{tmp_path / 'none'}", "transactions", "abort-transaction",
                                 "--txn-id", text])
    assert result.exit_code == 1 and result.stderr.startswith("--txn-id "), result.output
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_txn_id_out_of_range_is_refused():
    with pytest.raises(ValueError, match="Java long"):
        parse_txn_id(f"{2 ** 63},1")
    with pytest.raises(ValueError, match="expected"):
        parse_txn_id("1" * 5000 + ",1")


def test_token_is_a_global_auth_option_and_metrics_takes_it():
    from test_http_faults import Misbehaving
    from test_metrics import _exposition

    seen: list[str] = []

    def reply(path, headers):
        seen.append(headers.get("authorization", ""))
        return 200, _exposition(), {}

    server = Misbehaving(reply)
    try:
        for args, expected in (
                (["--token", "global-tok-1", "metrics", f"{server.url}/metrics"], "Bearer global-tok-1"),
                (["--auth-plugin", TOKEN_PLUGIN, "--auth-params", "token:plugin-tok-2", "metrics",
                  f"{server.url}/metrics"], "Bearer plugin-tok-2"),
                (["metrics", f"{server.url}/metrics", "--token", "own-tok-3"], "Bearer own-tok-3")):
            result = runner.invoke(app, [*args, "-o", "json"], env={"TXNADMIN_TOKEN": ""})
            assert result.exit_code == 0, (args, result.output)
            assert seen[-1] == expected and expected.split()[1] not in result.output
        both = runner.invoke(app, ["--token", "a-token-4", "metrics", f"{server.url}/metrics", "--token", "b-tok-5"])
        assert both.exit_code == 0 and seen[-1] == "Bearer b-tok-5"  # the one given to metrics itself
        env_token = runner.invoke(app, ["--token", "a-token-4", "metrics", f"{server.url}/metrics"],
                                  env={"TXNADMIN_TOKEN": "env-token-6"})
        assert env_token.exit_code == 0 and seen[-1] == "Bearer a-token-4"  # the command line wins over the env
        mixed = runner.invoke(app, ["--token", "a-token-4", "--auth-params", "token:x", "target"])
        assert mixed.exit_code == 2
    finally:
        server.close()


def test_context_commands_refuse_wrong_input_in_one_line(tmp_path):
    env = _env(tmp_path)
    for args, code in ((["context", "show"], 2), (["context", "use", "nope"], 2), (["context", "remove", "nope"], 2),
                       (["context", "add", "bad name", "-u", "http://b:8080"], 2),
                       (["context", "add", "x", "-u", "ftp://b"], 2),
                       (["context", "add", "x", "-u", "http://admin:pw-in-url-123@b:8080"], 2),
                       (["context", "add", "x", "-u", "http://b:8080", "--auth-plugin", "AuthenticationSasl"], 2)):
        result = runner.invoke(app, args, env=env)
        assert result.exit_code == code and len(result.stderr.strip().splitlines()) == 1, (args, result.output)
        assert "pw-in-url-123" not in result.output
    assert runner.invoke(app, ["context", "add", "a", "-u", "http://b:8080", "--use"], env=env).exit_code == 0
    assert runner.invoke(app, ["context", "remove", "a"], env=env).exit_code == 0
    listed = runner.invoke(app, ["context", "list", "-o", "json"], env=env)
    assert json.loads(listed.stdout)["current"] is None and json.loads(listed.stdout)["contexts"] == []
    (tmp_path / "home" / ".txnadmin" / "contexts.json").write_text('{"version": 1, "current": "gone", "contexts": {}}')
    broken = runner.invoke(app, ["context", "list"], env=env)
    assert broken.exit_code == 3 and "gone" in broken.stderr and len(broken.stderr.strip().splitlines()) == 1
