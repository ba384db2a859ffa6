"""The record channel: the record node's rank 0 appends each record to a file in the launch directory; the
launcher follows it and returns the records (the JSONL --out file is for users, not this return path)."""
import json
from pathlib import Path


class Channel:
    """Follows the records the record node's rank appends to the launch directory: complete lines only."""

    def __init__(self, path, writer):
        self.path, self.writer, self.records, self._offset = Path(path), writer, [], 0

    def poll(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1
        self._offset += end
        for line in data[:end].splitlines():
            rec = json.loads(line)
            self.records.append(rec)
            if self.writer:
                self.writer.write(rec)
