"""--api-key-file and the Authorization scheme (RFC 7235: case-insensitive).

Expected behaviour is the OpenAI API's: a missing or wrong key is 401 with an
OpenAI-shaped error; the right key (scheme spelled in any case) is accepted.
"""
import subprocess

import requests

from serverutil import Server, free_port


def test_key_from_file_and_scheme_case(ember_bin, smollm2_path, tmp_path):
    keyfile = tmp_path / "key"
    keyfile.write_text("s3cret-key\r\n")
    port = free_port()
    s = Server([ember_bin, "serve", "-m", smollm2_path, "-c", "256", "-np", "1", "-t", "1",
                "--port", str(port), "--api-key-file", str(keyfile)], port)
    try:
        url = f"http://127.0.0.1:{port}/v1/models"
        r = requests.get(url, timeout=30)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert requests.get(url, headers={"Authorization": "Bearer wrong"}, timeout=30).status_code == 401
        for scheme in ("Bearer", "bearer", "BEARER"):
            assert requests.get(url, headers={"Authorization": f"{scheme} s3cret-key"}, timeout=30).status_code == 200
        assert "s3cret-key" not in " ".join(s.proc.args)   # the key is not on the command line
    finally:
        assert s.stop() == 0


def test_key_file_errors(ember_bin, smollm2_path, tmp_path):
    r = subprocess.run([ember_bin, "serve", "-m", smollm2_path, "--api-key-file", str(tmp_path / "missing")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "cannot open" in r.stderr
    empty = tmp_path / "empty"
    empty.write_text("\n")
    r = subprocess.run([ember_bin, "serve", "-m", smollm2_path, "--api-key-file", str(empty)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "holds no key" in r.stderr
