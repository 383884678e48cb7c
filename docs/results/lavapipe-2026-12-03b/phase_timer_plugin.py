import time, sys, functools
from pytest_dispatch.measurement import meter, instructions
from pytest_dispatch.reference import model as refmodel

def timed(owner, name):
    original = getattr(owner, name)
    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        start = time.time()
        try:
            return original(*args, **kwargs)
        finally:
            extra = ""
            if name == "count":
                extra = f" sizes={args[2]} warm={kwargs.get('warm')}"
            sys.stderr.write(f"PROF {owner.__name__}.{name}{extra}: {time.time() - start:.2f} s\n")
    setattr(owner, name, wrapper)

for owner, name in ((meter._Sampler, "warm_up"), (meter._Sampler, "check_round"), (meter._Sampler, "count_instructions"),
                    (instructions.Counter, "count"), (refmodel.ReferenceModel, "__init__"), (refmodel.ReferenceModel, "forward")):
    timed(owner, name)

def pytest_runtest_logstart(nodeid, location):
    sys.stderr.write(f"PROF TEST {nodeid} at {time.time():.1f}\n")
