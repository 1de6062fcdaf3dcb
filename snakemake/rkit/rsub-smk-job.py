# rkit's quick start of Snakemake inside a job (rsub(1), SNAKEMAKE).
#
# Every cluster job of a Snakemake 7 workflow runs Snakemake again, to run its one rule:
# `python3 -m snakemake --target-jobs ... --mode 2`. Before parsing the Snakefile it
# spends about a second of CPU importing what a job's local files never use: the Azure,
# S3 and Google Cloud SDKs (smart_open loads every transport it finds), requests, pandas
# (only hashed params need it), setuptools' copy of distutils (for one version compare)
# and, to schedule its one job, the ILP solver and pkg_resources (through stopit).
# `rsub snakemake submit` runs that same command line through this file instead, which
# makes those imports cheap, then hands over to snakemake.main() unchanged:
#   - smart_open is imported with the cloud SDKs hidden: in the job it parses local paths
#     (remote files go through Snakemake's own remote providers, which import their SDK
#     themselves); a Snakefile that includes rules from an s3://, gs:// or azure:// URL not
#     in Snakemake's source cache needs RSUB_SNAKEMAKE_QUICK=0;
#   - requests and pandas are loaded lazily: on first use;
#   - distutils is Python's own, not setuptools' (the same LooseVersion);
#   - a job of one target (not a group) is scheduled by the greedy selector: the ILP
#     scheduler hands a single job to it anyway, after importing pulp and stopit.
# The rule's commands run as child processes and see none of this. RSUB_SNAKEMAKE_QUICK=0
# in the environment makes it plain `python3 -m snakemake`.
import importlib.abc
import importlib.util
import itertools
import os
import runpy
import sys
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


class _Deferred(types.ModuleType):
    """A module whose code runs when an attribute it lacks is first read."""

    def __getattr__(self, attr):
        loader = self.__dict__.pop("_rsub_loader", None)
        if loader is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}")
        self.__class__ = types.ModuleType
        loader.exec_module(self)
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
    """Defers these modules' code to their first use. (importlib.util.LazyLoader would
    run it on a second `import`, which reads the module's __spec__.)"""

    def __init__(self, names):
        self.names = names

    def find_spec(self, name, path, target=None):
        if name not in self.names:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _DeferredLoader(spec.loader)
        return spec


def _quick_imports():
    sys.meta_path.insert(0, _Lazy({"pandas", "requests"}))
    hidden = _Hidden({"azure", "boto3", "botocore", "google"})
    sys.meta_path.insert(0, hidden)
    try:
        import smart_open  # noqa: F401  (registers only the transports it finds now)
    except ImportError:
        pass
    finally:
        sys.meta_path.remove(hidden)
    hack = [f for f in sys.meta_path if type(f).__module__ == "_distutils_hack"]
    for f in hack:
        sys.meta_path.remove(f)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import distutils.version  # noqa: F401
    except ImportError:  # no stdlib distutils (Debian's python3-distutils): setuptools' then
        sys.modules.pop("distutils", None)
        sys.meta_path[0:0] = hack


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
sys.argv[0] = "snakemake"
runpy.run_module("snakemake", run_name="__main__", alter_sys=True)
