# Spack recipe for rkit. Not built in rkit's CI: its machines have no Spack and no network
# to fetch sources from. To use it, add this folder as a Spack repository and point `git`
# at the site's mirror of rkit:
#
#   spack repo add packaging/spack          # the folder holding repo.yaml
#   spack install rkit@main                 # +cuda for rbench's GPU suites and rtrain's CUDA device
#
# The dependency names are Spack's builtin packages; the versions are those rkit is built
# and tested with on Debian 12 (packaging/install-deps.sh), as lower bounds.

from spack.package import *


class Rkit(CMakePackage, CudaPackage):
    """Composable command-line tools for an ML research compute platform: rtop (topology,
    placement, samples), rsub (jobs and a multi-tenant scheduler; Slurm and Kubernetes),
    rckpt (checkpoint archives), rbench (hardware benchmarks), rtrain (launcher and native
    trainer) and rcost (cost attribution)."""

    homepage = "https://rkit.invalid/"  # internal project: no public home page
    git = "file:///srv/git/rkit.git"  # replace with the site's mirror of the repository

    maintainers("rkit-maintainers")
    license("Proprietary")

    version("main", branch="main")

    variant("tests", default=False, description="Build the GoogleTest unit tests")

    depends_on("cxx", type="build")
    depends_on("cmake@3.25:", type="build")
    depends_on("pkgconfig", type="build")

    depends_on("cli11@2.3:")
    depends_on("fmt@9:")
    depends_on("tomlplusplus@3.3:")
    depends_on("nlohmann-json@3.11:")
    depends_on("hwloc@2.9:")
    depends_on("zstd@1.5:")
    depends_on("libarchive@3.6:")
    depends_on("xxhash@0.8:")
    depends_on("openblas@0.3.21:")
    depends_on("gloo")
    depends_on("sqlite@3.40:")
    depends_on("simdjson@3:")
    depends_on("cpp-httplib@0.11:")
    depends_on("googletest", type="build", when="+tests")
    depends_on("nccl", when="+cuda")

    conflicts("%gcc@:11", msg="rkit needs C++20 (GCC 12 or newer)")

    def cmake_args(self):
        args = [
            self.define_from_variant("RKIT_TESTS", "tests"),
            self.define_from_variant("RKIT_CUDA", "cuda"),
        ]
        if self.spec.satisfies("+cuda"):
            archs = self.spec.variants["cuda_arch"].value
            if archs and archs[0] != "none":
                args.append(self.define("CMAKE_CUDA_ARCHITECTURES", ";".join(archs)))
        return args

