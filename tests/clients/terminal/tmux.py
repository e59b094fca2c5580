"""Running ``fleet chat`` in a real pseudo-terminal (a tmux pane) and reading its screen."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

WIDTH, HEIGHT = 120, 50


class Pane:
    """One tmux server (own socket) running one command in a 120x50 pane."""

    def __init__(self, socket: Path, cwd: Path, env: dict[str, str]) -> None:
        self.socket = socket
        self.cwd = cwd
        self.env = env

    def _tmux(self, *args: str) -> str:
        result = subprocess.run(
            ["tmux", "-S", str(self.socket), *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
            env=self.env,
        )
        return result.stdout

    def start(self, *fleet_args: str) -> Pane:
        command = shlex.join([sys.executable, "-m", "fleet_rlm", "chat", *fleet_args])
        # The shell stays after the chat exits, so the screen can still be read.
        script = f"{command}; echo chat-exited-$?; sleep 600"
        # The tmux server is started by this call, so the pane inherits exactly self.env.
        self._tmux("new-session", "-d", "-s", "chat", "-x", str(WIDTH), "-y", str(HEIGHT), "-c", str(self.cwd), script)
        return self

    def screen(self) -> str:
        """Everything the pane shows, scrollback included, without trailing blanks."""
        text = self._tmux("capture-pane", "-p", "-J", "-S", "-5000", "-t", "chat")
        return "\n".join(line.rstrip() for line in text.splitlines()).strip("\n")

    def type(self, text: str, enter: bool = True) -> None:
        self._tmux("send-keys", "-t", "chat", "-l", text)
        if enter:
            self._tmux("send-keys", "-t", "chat", "Enter")

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", "chat", *keys)

    def wait_for(self, pattern: str, timeout: float = 60.0, after: int = 0) -> str:
        """Wait until ``pattern`` (a regex) appears in the screen text past offset ``after``; returns the screen."""
        deadline = time.monotonic() + timeout
        compiled = re.compile(pattern, re.MULTILINE)
        while True:
            screen = self.screen()
            if compiled.search(screen, after):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"{pattern!r} did not appear on the screen within {timeout}s:\n{screen}")
            time.sleep(0.1)

    def wait_for_prompt(self, label: str, timeout: float = 60.0) -> str:
        """Wait for an empty prompt as the last line (the chat is ready for input)."""
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            last = screen.splitlines()[-1] if screen else ""
            if last.startswith(f"fleet:{label}") and last.endswith(">"):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"no prompt within {timeout}s:\n{screen}")
            time.sleep(0.1)

    def close(self) -> None:
        subprocess.run(["tmux", "-S", str(self.socket), "kill-server"], capture_output=True, timeout=30, env=self.env)


def chat_env(tmp_path: Path, extra: dict[str, str]) -> dict[str, str]:
    """The environment of the chat process: no inherited FLEET_* settings, config under tmp_path."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    base.update(
        {"XDG_CONFIG_HOME": str(tmp_path / "config"), "FLEET_HOME": str(tmp_path / "home"), "TERM": "xterm-256color"}
    )
    base.update(extra)
    return base
