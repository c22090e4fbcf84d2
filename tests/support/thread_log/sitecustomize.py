"""Loaded by a test's server process when this folder is on its PYTHONPATH and EVERLORE_THREAD_LOG
names a file: each Python thread the process starts writes its native id, its name and the stack
that started it there (a JSON line), so a test that counts a server's threads can say which began
and where (tests/stories/test_streaming.py). Threads of native libraries are not seen here."""

import json
import os
import threading
import traceback

_path = os.environ.get("EVERLORE_THREAD_LOG")
if _path:
    _start = threading.Thread.start

    def _logged_start(self, *args, **kwargs):
        stack = "".join(traceback.format_stack(limit=14)[:-1])
        run = self.run

        def logged_run():
            with open(_path, "a") as log:
                log.write(json.dumps({"tid": threading.get_native_id(), "name": self.name, "stack": stack}) + "\n")
            run()

        self.run = logged_run
        return _start(self, *args, **kwargs)

    threading.Thread.start = _logged_start
