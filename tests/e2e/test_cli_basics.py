"""The `ember` command's top level: help, version, unknown commands."""
import subprocess


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=60)


def test_help_lists_commands(ember_bin):
    r = run(ember_bin, "--help")
    assert r.returncode == 0
    for cmd in ("serve", "run", "inspect", "tokenize"):
        assert f"  {cmd} " in r.stdout


def test_unknown_command_is_an_error(ember_bin):
    r = run(ember_bin, "frobnicate")
    assert r.returncode == 2
    assert "unknown command 'frobnicate'" in r.stderr


def test_no_args_prints_usage_and_fails(ember_bin):
    r = run(ember_bin)
    assert r.returncode == 2
    assert "usage: ember COMMAND" in r.stderr
