"""Start and stop a real server process (ember serve or tests/tools/fake_serve)
on a free port, for the end-to-end server tests."""
import os
import signal
import socket
import subprocess
import time

import requests


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, argv, port, startup_timeout=120):
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.log = open(os.devnull if os.environ.get("EMBER_QUIET") else f"/tmp/ember-e2e-{port}.log", "w")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + startup_timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {argv}")
            try:
                if requests.get(self.base + "/health", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        self.proc.kill()
        raise RuntimeError("server did not become healthy")

    def stop(self, sig=signal.SIGTERM, timeout=20):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode

    def wait_idle(self, timeout=5, headers=None):
        """Wait until no slot is processing; returns the /slots answer."""
        deadline = time.time() + timeout
        while True:
            slots = requests.get(self.base + "/slots", headers=headers, timeout=5).json()
            if not any(s["is_processing"] for s in slots) or time.time() > deadline:
                return slots
            time.sleep(0.02)
