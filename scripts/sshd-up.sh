#!/usr/bin/env bash
# A real OpenSSH server on 127.0.0.1 for the ssh backend's tests and benchmarks.
#
# Installs openssh-server when /usr/sbin/sshd is missing, creates a dedicated account (root's own
# dotfiles on these machines add ~80 ms to every remote command), generates a host key and client keys
# under a cache dir, writes an sshd config of its own (nothing in /etc/ssh is used or changed) and
# starts `/usr/sbin/sshd -f CONFIG` when it is not already answering. The connection facts go to
# $CACHE/connection.json, which tests/infra/ssh.py reads.
#
# Idempotent and fast when already up (a pid check and a TCP probe). A lock serialises concurrent
# callers. Environment: EXECUTOR_TEST_CACHE (default /var/cache/executor-test), SSHD_TEST_PORT
# (default 22022; PORT+1 is the same server with MaxSessions 3), SSHD_TEST_USER (default executor-test).
# The ports sit below the kernel's ephemeral range (32768-60999 here): a port in that range can be
# handed to any program's bind(0) or outgoing connection while sshd is down, and sshd then comes back
# without it.
set -euo pipefail

CACHE=${EXECUTOR_TEST_CACHE:-/var/cache/executor-test}/ssh
PORT=${SSHD_TEST_PORT:-22022}
LOW_PORT=$((PORT + 1))
TEST_USER=${SSHD_TEST_USER:-executor-test}
CONFIG=$CACHE/sshd_config
PIDFILE=$CACHE/sshd.pid
FACTS=$CACHE/connection.json

say() { echo "sshd-up: $*" >&2; }

sshd_answers() (  # $1 = port: an SSH server (not some other program) greets us there
    exec 2>/dev/null 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    IFS= read -r -t 3 greeting <&3 || exit 1
    [[ $greeting == SSH-2.0-* ]]
)

alive() {  # $1 = pid: the process exists and is not a zombie
    [ -n "$1" ] && [ -e "/proc/$1" ] && ! grep -qs '^State:[[:space:]]*Z' "/proc/$1/status"
}

running() {  # the server is ours, alive, and answers on both of its ports
    [ -s "$PIDFILE" ] && alive "$(cat "$PIDFILE")" && sshd_answers "$PORT" && sshd_answers "$LOW_PORT"
}

stop_old() {  # end a listener from an earlier start and wait until it has let go of its ports
    local pid
    pid=$(cat "$PIDFILE" 2>/dev/null || true)
    for p in $pid $(pgrep -f "^sshd: /usr/sbin/sshd -f $CONFIG " || true); do
        kill "$p" 2>/dev/null || true
        for _ in $(seq 100); do alive "$p" || break; sleep 0.05; done
        alive "$p" && kill -KILL "$p" 2>/dev/null || true
    done
    rm -f "$PIDFILE"
}

LAYOUT=3  # bump when the config or the facts change: an older server is then reconfigured

if grep -qs "\"layout\": $LAYOUT," "$FACTS" && running; then
    exit 0
fi

if [ "$(id -u)" != 0 ]; then
    say "no test sshd runs and setting one up needs root (a package, an account); run this as root"
    exit 1
fi

mkdir -p "$CACHE"
chmod 755 "$CACHE"
exec 9>"$CACHE/sshd-up.lock"
flock -w 600 9 || { say "timed out waiting for another sshd-up"; exit 1; }

if ! [ -x /usr/sbin/sshd ]; then
    say "installing Debian's openssh-server"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-cache policy openssh-server | grep -q 'Candidate: [0-9]'; then
        apt-get -o DPkg::Lock::Timeout=600 update -q >&2
    fi
    # The package's postinst may try to start the system service; on machines without an init it
    # cannot, which is fine: we run our own daemon below.
    apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends openssh-server >&2
fi

if ! id "$TEST_USER" >/dev/null 2>&1; then
    say "creating the test account $TEST_USER"
    useradd -m -s /bin/bash "$TEST_USER"
fi
# '*' = no password, but not locked: sshd refuses public keys for a locked ('!') account.
usermod -p '*' "$TEST_USER"

keygen() {  # $1 = path, $2 = comment
    [ -s "$1" ] || ssh-keygen -q -t ed25519 -N '' -C "$2" -f "$1"
}
keygen "$CACHE/host_ed25519" "executor-test host"
keygen "$CACHE/client_ed25519" "executor-test client"
keygen "$CACHE/other_ed25519" "executor-test unauthorized client"
# sshd reads authorized_keys as the account: the file (not the private keys) must be readable to it.
cp "$CACHE/client_ed25519.pub" "$CACHE/authorized_keys"
chmod 644 "$CACHE/authorized_keys"
{
    echo "[127.0.0.1]:$PORT $(cut -d' ' -f1,2 "$CACHE/host_ed25519.pub")"
    echo "[127.0.0.1]:$LOW_PORT $(cut -d' ' -f1,2 "$CACHE/host_ed25519.pub")"
} > "$CACHE/known_hosts"

cat > "$CONFIG.new" <<EOF
# Written by scripts/sshd-up.sh: the executor ssh backend's test server.
ListenAddress 127.0.0.1
Port $PORT
Port $LOW_PORT
HostKey $CACHE/host_ed25519
PidFile $PIDFILE
AuthorizedKeysFile $CACHE/authorized_keys
AllowUsers $TEST_USER
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin no
AllowTcpForwarding yes
# The tests open many channels on one connection (a shell per task plus helpers).
MaxSessions 64
MaxStartups 50:30:100
PrintMotd no
PrintLastLog no
UseDNS no
ClientAliveInterval 0
Subsystem sftp internal-sftp
LogLevel INFO
# OpenSSH's default MaxSessions is 10; this port has 3, to test what happens past the limit.
Match LocalPort $LOW_PORT
    MaxSessions 3
EOF
if [ -f "$CONFIG" ] && ! cmp -s "$CONFIG" "$CONFIG.new" && running; then
    say "the sshd config changed: restarting sshd"
    stop_old
fi
mv "$CONFIG.new" "$CONFIG"

if ! running; then
    mkdir -p /run/sshd
    chmod 755 /run/sshd
    stop_old
    for port in "$PORT" "$LOW_PORT"; do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            say "127.0.0.1:$port is taken by another program; free it or set SSHD_TEST_PORT (PORT and PORT+1 are used)"
            exit 1
        fi
    done
    /usr/sbin/sshd -t -f "$CONFIG"
    /usr/sbin/sshd -f "$CONFIG" -E "$CACHE/sshd.log"
    for _ in $(seq 100); do
        running && break
        sleep 0.05
    done
    running || { say "sshd did not start on both ports; see $CACHE/sshd.log"; tail -5 "$CACHE/sshd.log" >&2; exit 1; }
    say "sshd listening on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"))"
fi

cat > "$FACTS.new" <<EOF
{
  "layout": $LAYOUT,
  "host": "127.0.0.1",
  "port": $PORT,
  "low_sessions_port": $LOW_PORT,
  "user": "$TEST_USER",
  "key_file": "$CACHE/client_ed25519",
  "known_hosts": "$CACHE/known_hosts",
  "other_key_file": "$CACHE/other_ed25519",
  "host_key_pub": "$CACHE/host_ed25519.pub",
  "sshd_config": "$CONFIG",
  "sshd_pidfile": "$PIDFILE"
}
EOF
mv "$FACTS.new" "$FACTS"
