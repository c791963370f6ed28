# icicle's Spack package, in the layout of spack/spack-packages (Spack >= 1.0): a CargoPackage
# (repos/spack_repo/builtin/build_systems/cargo.py: `cargo install --root out --path .` then
# `install_tree("out", prefix)`), variants as ripgrep's package.py passes features.
#
# From a checkout (there is no release tarball to fetch yet):
#   spack repo add deploy/spack/spack_repo/icicle
#   spack develop --path "$PWD" icicle@=0.1.0
#   spack install icicle@=0.1.0 +mpi +prism

from spack_repo.builtin.build_systems.cargo import CargoPackage

from spack.package import *


class Icicle(CargoPackage):
    """Searchable, fresh HPC file-system metadata: snapshots (GUFI, listings, mmapplypolicy,
    S3) into search records with quantile sketches, real-time Lustre, GPFS and local monitors,
    an embedded index with the Globus Search API, and PRISM's catalog agent and object
    scheduler for MPI I/O."""

    # No `homepage` or `url` yet: icicle has no public site or release tarball; install from a
    # checkout with `spack develop` (above).

    license("Apache-2.0")

    version("0.1.0")

    variant("mpi", default=False, description="icicle-mpi and swiftload (also as swiftload_tool): snapshots and PRISM's loader over MPI ranks")
    variant("prism", default=True, description="icicle-catalogd and the LD_PRELOAD catalog agent (libcatalog_agent.so)")

    # The toolchain the project is built and tested with (rustc 1.95, edition 2021).
    depends_on("rust@1.95:", type="build")
    depends_on("c", type="build")
    depends_on("cxx", type="build")
    depends_on("pkgconfig", type="build")
    # librdkafka's TLS, SASL SCRAM/OAUTHBEARER (OpenSSL) and OIDC token fetch (libcurl).
    depends_on("openssl")
    depends_on("curl")
    with when("+mpi"):
        depends_on("mpi")
        # The mpi crate's bindgen.
        depends_on("llvm", type="build")

    @property
    def build_args(self):
        # The dist profile: stripped, one codegen unit, fat LTO (Cargo.toml [profile.dist]).
        return ["--locked", "--profile", "dist"]

    @run_after("install")
    def install_extras(self):
        # Relative paths below are the checkout's (cargo's target/ inside it).
        with working_dir(self.stage.source_path):
            cargo = self.module.cargo
            jobs = ["-j", str(make_jobs)]
            if self.spec.satisfies("+prism"):
                cargo("install", "--root", self.prefix, "--path", "plugins/prism-agent", "--locked", "--profile", "dist", *jobs)
                # The agent is a cdylib, which `cargo install` does not install.
                cargo("build", "-p", "icicle-prism-agent", "--lib", "--locked", "--profile", "dist", *jobs)
                mkdirp(self.prefix.lib)
                agent = join_path("target", "dist", "libcatalog_agent.so")
                install(agent, self.prefix.lib)
            if self.spec.satisfies("+mpi"):
                cargo("install", "--root", self.prefix, "--path", "icicle-mpi", "--locked", "--profile", "dist", *jobs)
                cargo("install", "--root", self.prefix, "--path", "plugins/prism-mpi", "--locked", "--profile", "dist", *jobs)
            icicle = Executable(self.prefix.bin.icicle)
            mkdirp(bash_completion_path(self.prefix))
            with open(join_path(bash_completion_path(self.prefix), "icicle"), "w") as f:
                icicle("completions", "bash", output=f)
            mkdirp(zsh_completion_path(self.prefix))
            with open(join_path(zsh_completion_path(self.prefix), "_icicle"), "w") as f:
                icicle("completions", "zsh", output=f)
            mkdirp(fish_completion_path(self.prefix))
            with open(join_path(fish_completion_path(self.prefix), "icicle.fish"), "w") as f:
                icicle("completions", "fish", output=f)
            icicle("man", "--dir", join_path(self.prefix.share, "man", "man1"))
