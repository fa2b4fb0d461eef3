"""Run a ragwb command on a real pseudo-terminal and answer its question (the cost line's yes/no)."""
import os
import pty
import select
import subprocess
import sys
import time


def answer_prompt(argv: list[str], answer: str, count=lambda: 0, deadline_s: float = 180,
                  expect_prompt: bool = True):
    """(exit code, everything it printed, ``count()`` when the question appeared). Waits on the command's
    output for the `[y/N]` question (with a deadline), types ``answer``, then reads until it exits."""
    main_fd, sub_fd = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "evals.cli", *argv], stdin=sub_fd, stdout=sub_fd, stderr=sub_fd,
                            close_fds=True)
    os.close(sub_fd)
    seen, at_prompt, deadline = b"", None, time.monotonic() + deadline_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main_fd], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(main_fd, 4096)
                except OSError:  # the terminal closed: the command ended
                    break
                if not chunk:
                    break
                seen += chunk
                if at_prompt is None and b"[y/N]" in seen:
                    at_prompt = count()
                    os.write(main_fd, answer.encode() + b"\n")
            elif proc.poll() is not None:
                break
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(main_fd)
    said = seen.decode(errors="replace")
    assert (at_prompt is not None) == expect_prompt, f"[y/N] question asked: {at_prompt is not None}: {said}"
    return proc.returncode, said, at_prompt
