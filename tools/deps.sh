# Sourced by tools/demo and tools/check: installs the Debian packages xgrad needs, only those
# that are missing, so a second run costs a dpkg query and nothing else. Open MPI is optional for
# the build (without it there is no xgrad::distributed) but installed so its tests run. CLI11
# (flags) and nlohmann-json (metrics.json) are needed by the examples only. oneDNN runs the
# bfloat16 products; the build works without it, but installs it so autocast's tests run. Graphviz's
# library lays out the pictures of the autograd graph (optional too: without it only DOT is written).
XGRAD_PACKAGES=(build-essential cmake pkg-config
                libxtensor-dev libxtensor-blas-dev xtl-dev libxsimd-dev
                libopenblas-dev libfmt-dev catch2 zlib1g-dev libdnnl-dev libgraphviz-dev
                libopenmpi-dev openmpi-bin
                libcli11-dev nlohmann-json3-dev)

xgrad_install_missing() {
    local missing=()
    for p in "${XGRAD_PACKAGES[@]}" "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "xgrad: installing ${missing[*]}" >&2
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
