# Shared by the provisioning scripts: root only for the steps that change the machine, and
# one `apt-get update` per run at most. The sourcing script defines `log` and `die`, and may
# set ROOT_HINT to say what else the user can do instead of running as root.
# shellcheck shell=bash

SUDO=()
need_root() {
    if [ "$(id -u)" -eq 0 ]; then
        SUDO=()
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO=(sudo -n)
    else
        die "$1 needs root (or password-less sudo); run this script as root once${ROOT_HINT:+, $ROOT_HINT}"
    fi
}

export DEBIAN_FRONTEND=noninteractive
APT_UPDATED=0
apt_update() {
    [ "$APT_UPDATED" -eq 1 ] && return 0
    need_root "apt-get update"
    log "apt-get update"
    "${SUDO[@]}" apt-get update -qq || die "apt-get update failed (is a Debian mirror reachable?)"
    APT_UPDATED=1
}
