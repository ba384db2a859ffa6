"""The load `commbench node --level full` puts on every GPU while it reads them: GEMMs (the GPU at full clocks and
power, where throttling shows) and pinned host-to-device copies (the PCIe link at its full speed: an idle link
slows down, so its generation and width are read under this load). torch is imported only here."""
import threading


class Load:
    """Start with start(); stop() waits for every GPU's loop. why: None, or why there is no load."""

    def __init__(self):
        self.why, self.threads, self._stop = None, [], threading.Event()
        try:
            import torch
        except ImportError:
            self.why = "no load: torch is not installed"
            return
        if not torch.cuda.is_available():
            self.why = "no load: CUDA is not available to torch"
            return
        self.torch = torch

    def start(self):
        if self.why is None:
            for d in range(self.torch.cuda.device_count()):
                t = threading.Thread(target=self._loop, args=(d,), daemon=True, name=f"commbench-load-{d}")
                t.start()
                self.threads.append(t)
        return self

    def _loop(self, device):
        torch = self.torch
        with torch.cuda.device(device):
            a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
            host = torch.empty(64 << 20, dtype=torch.uint8).pin_memory()
            dev = torch.empty_like(host, device="cuda")
            while not self._stop.is_set():
                for _ in range(20):
                    a = torch.tanh(a @ a)
                dev.copy_(host, non_blocking=True)
                torch.cuda.synchronize()

    def stop(self):
        self._stop.set()
        for t in self.threads:
            t.join(timeout=60)
