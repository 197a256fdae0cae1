# Links with mold when it is installed (scripts/setup installs it as root):
# the test suite links some fifty binaries, each holding wasmtime, sqlx and
# tonic, and mold links them several times faster than the system's ld.
# Source it from a script before cargo. It sets the target's rustflags, so
# a plain `cargo` shares the scripts' build only with the same setting, for
# example in ~/.cargo/config.toml:
#
#   [target.x86_64-unknown-linux-gnu]
#   rustflags = ["-C", "link-arg=-fuse-ld=mold"]
#
# An existing setting of that variable is kept.
# shellcheck shell=bash

if [ "$(uname -m)-$(uname -s)" = x86_64-Linux ] && command -v mold >/dev/null 2>&1 \
    && [ -z "${CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS+set}" ]; then
    export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C link-arg=-fuse-ld=mold"
fi
