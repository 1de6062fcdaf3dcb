# rkit's quick start of Snakemake inside a job (rsub(1), SNAKEMAKE).
#
# Every cluster job of a Snakemake 7 workflow runs Snakemake again, to run its one rule:
# `python3 -m snakemake --target-jobs ... --mode 2`. Before parsing the Snakefile it
# spends about a second of CPU importing what most jobs never use: the Azure, S3 and
# Google Cloud SDKs (smart_open loads every transport it finds), requests, pandas (only
# hashed params need it), setuptools' copy of distutils (for one version compare) and, to
# schedule its one job, the ILP solver and pkg_resources (through stopit).
# `rsub snakemake submit` runs that same command line through this file instead, which
# makes those imports cheap, then hands over to snakemake's main unchanged:
#   - smart_open is imported with the cloud SDKs hidden, and each transport that this
#     left out (s3, azure, ...) is registered again as a stand-in that imports the real
#     one on first use: an s3:// path works as before, its SDK loaded when needed;
#   - requests and pandas load on first use of an attribute (an import that succeeds
#     where the package is broken fails there instead);
#   - distutils is Python's own, not setuptools' (the same LooseVersion);
#   - a job of one target (not a group) is scheduled by the greedy selector: the ILP
#     scheduler hands a single job to it anyway, after importing pulp and stopit.
# The Snakefile, its functions and run: blocks run in this process and see these modules
# as described; shell:, script: and notebook: commands are child processes and see none
# of it. RSUB_SNAKEMAKE_QUICK=0 in the environment makes it plain `python3 -m snakemake`.
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import itertools
import os
import runpy
import sys
import threading
import types
import warnings


class _Hidden(importlib.abc.MetaPathFinder):
    """Makes these top-level packages look absent."""

    def __init__(self, names):
        self.names = names

    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"{name} (hidden by rsub-smk-job.py)", name=name)
        return None


_load_lock = threading.RLock()


class _Deferred(types.ModuleType):
    """A module whose code runs when an attribute it lacks is first read."""

    def __getattr__(self, attr):
        with _load_lock:
            loader = self.__dict__.pop("_rsub_loader", None)
            if loader is not None:
                self.__class__ = types.ModuleType
                self.__loader__ = self.__spec__.loader = loader
                try:
                    loader.exec_module(self)
                except BaseException:
                    sys.modules.pop(self.__name__, None)  # as a failed import leaves it
                    raise
        if type(self) is _Deferred:  # still deferred: an attribute of a module being made
            raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}")
        return getattr(self, attr)


class _DeferredLoader(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__class__ = _Deferred
        module._rsub_loader = self.loader


class _Lazy(importlib.abc.MetaPathFinder):
    """Defers these top-level modules' code to their first use. (importlib.util.LazyLoader
    would run it on a second `import`, which reads the module's __spec__.)"""

    def __init__(self, names):
        self.names = names

    def find_spec(self, name, path, target=None):
        if name not in self.names:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _DeferredLoader(spec.loader)
        return spec


class _Transport(types.ModuleType):
    """smart_open's transport module NAME, imported (SDK and all) on first use."""

    def __init__(self, name):
        super().__init__(name)
        self._rsub_real = None

    def __getattr__(self, attr):
        with _load_lock:
            if self._rsub_real is None:
                sys.modules.pop(self.__name__, None)  # the copy made with the SDK hidden
                real = importlib.import_module(self.__name__)
                if getattr(real, "MISSING_DEPS", False):
                    from smart_open.transport import _MISSING_DEPS_ERROR

                    raise ImportError(_MISSING_DEPS_ERROR % dict(module=self.__name__.rsplit(".")[-1]))
                self._rsub_real = real
        return getattr(self._rsub_real, attr)


def _quick_imports():
    sys.meta_path.insert(0, _Lazy({"pandas", "requests"}))
    hidden = _Hidden({"azure", "boto3", "botocore", "google"})
    sys.meta_path.insert(0, hidden)
    try:
        import smart_open.transport as transport  # registers only the transports it finds now
    except ImportError:
        transport = None
    finally:
        sys.meta_path.remove(hidden)
    errors = getattr(transport, "_ERRORS", None)
    registry = getattr(transport, "_REGISTRY", None)
    if isinstance(errors, dict) and isinstance(registry, dict):
        for scheme, module in list(errors.items()):
            registry[scheme] = _Transport(f"smart_open.{module}")
            del errors[scheme]
        transport.SUPPORTED_SCHEMES = tuple(sorted(registry))
    hack = [f for f in sys.meta_path if type(f).__module__ == "_distutils_hack"]
    for f in hack:
        sys.meta_path.remove(f)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import distutils.version  # noqa: F401
    except ImportError:  # no stdlib distutils (Debian's python3-distutils): setuptools' then
        sys.modules.pop("distutils", None)
    finally:
        sys.meta_path[0:0] = hack  # distutils is imported now: they act only on a new import


def _greedy_for_one_job(argv):
    """--scheduler ilp -> greedy where --target-jobs names one job."""
    if "--target-jobs" not in argv or "--scheduler" not in argv:
        return
    first = argv.index("--target-jobs") + 1
    targets = list(itertools.takewhile(lambda a: not a.startswith("-"), argv[first:]))
    at = argv.index("--scheduler") + 1
    if len(targets) == 1 and at < len(argv) and argv[at] == "ilp":
        argv[at] = "greedy"


if os.environ.get("RSUB_SNAKEMAKE_QUICK", "1") != "0":
    _quick_imports()
    _greedy_for_one_job(sys.argv)
sys.path[0] = os.getcwd()  # as for python3 -m snakemake, not this file's folder
runpy.run_module("snakemake", run_name="__main__", alter_sys=True)
