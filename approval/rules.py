"""The rule registry: every rule id the detector can emit, its family and default reason.

Rule ids are a public, stable contract (operators name them in config, approvals are
keyed by them, audit records carry them), so they live in one table that config
validation checks against.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    id: str
    family: str
    reason: str
    hardline: bool = False  # on the default floor: DENY in every mode, never approvable


_RULES: tuple[Rule, ...] = (
    # deletion
    Rule(
        "rm_recursive_root",
        "delete",
        "Recursively deletes the filesystem root, a home directory or a system directory.",
        True,
    ),
    Rule(
        "find_delete_root",
        "delete",
        "find deletes everything under the filesystem root, a home or a system directory.",
        True,
    ),
    Rule(
        "rsync_delete_root",
        "delete",
        "rsync --delete would wipe the filesystem root, a home or a system directory.",
        True,
    ),
    Rule("rm_system_path", "delete", "Deletes files inside a system directory or a sensitive home directory."),
    Rule(
        "rm_unresolved_path",
        "delete",
        "Recursively deletes a path built from a variable the gate cannot see; if it is empty this hits the root.",
    ),
    Rule("move_system_path", "delete", "Moves a system directory or the home directory away."),
    Rule("user_home_delete", "delete", "Deletes a user account together with its home directory."),
    # disks
    Rule("disk_format", "disk", "Formats or wipes a disk or partition.", True),
    Rule("disk_write", "disk", "Writes raw bytes onto a block device.", True),
    Rule("disk_partition", "disk", "Changes a disk's partition table."),
    Rule("volume_destroy", "disk", "Destroys a storage volume, pool or encrypted container."),
    Rule("disk_image_write", "disk", "Writes an image onto a drive, erasing what is on it."),
    Rule("device_write", "disk", "Points a tool that can write at a block device; it may overwrite the disk."),
    # power / processes
    Rule("power", "power", "Shuts down, reboots or halts the machine.", True),
    Rule("fork_bomb", "process", "A fork bomb: it multiplies processes until the machine stops responding.", True),
    Rule("kill_all", "process", "Kills every process the user can signal.", True),
    Rule(
        "kill_broad",
        "process",
        "Kills a broad set of processes (a whole user, or every process matching a catch-all pattern).",
    ),
    # services
    Rule("service_stop", "service", "Stops, disables or masks a system service."),
    # system writes and persistence
    Rule("system_write", "system", "Writes into a system path (/etc, /usr, /bin, /boot, /sys, /proc...)."),
    Rule(
        "persistence_write",
        "system",
        "Writes a shell startup file, authorized_keys, a crontab or sudoers: a persistence point.",
    ),
    Rule("boot_write", "system", "Rewrites the boot loader, its configuration or the initramfs."),
    Rule("chmod_recursive_system", "system", "Recursively changes permissions or ownership of a system path."),
    Rule("chmod_setuid", "system", "Sets a setuid or setgid bit, so the program runs with its owner's privileges."),
    Rule("system_restore", "system", "Restores or factory-resets the whole system, overwriting what is there."),
    # code you cannot see
    Rule("pipe_to_shell", "remote", "Runs code downloaded from the network without showing it."),
    Rule("download_then_run", "remote", "Downloads a file and then runs it in the same command."),
    Rule("decode_to_shell", "remote", "Decodes hidden text and runs it as code."),
    Rule("reverse_shell", "remote", "Opens a shell reachable over the network (reverse or bind shell)."),
    Rule("inline_code_delete", "inline", "Inline interpreter code deletes files."),
    Rule("inline_code_kill", "inline", "Inline interpreter code kills processes."),
    Rule("inline_code_shell", "inline", "Inline interpreter code runs shell commands the gate cannot see."),
    Rule(
        "script_unread",
        "remote",
        "Runs a script the gate could not read from the task's backend (missing, unreadable or too big).",
    ),
    Rule(
        "code_handoff",
        "remote",
        "Hands shell code the gate cannot read to a program that runs it (sed e, a hooks directory, a makefile or"
        " commands from live input, a shell behind >( )).",
    ),
    Rule(
        "unknown_program",
        "remote",
        "Runs a program whose name the gate cannot know (built by an expansion or command it does not evaluate).",
    ),
    # data
    Rule("sql_destructive", "data", "Destructive SQL: drops or truncates data, or deletes/updates every row."),
    Rule("db_drop", "data", "Drops a whole database."),
    Rule("redis_flush", "data", "Flushes every key from a Redis database."),
    Rule("mongo_drop", "data", "Drops a MongoDB database or collection, or deletes every document."),
    Rule("data_restore_overwrite", "data", "Restores a backup over a live data store, replacing its contents."),
    # git
    Rule("git_force_push", "git", "Force-pushes, which can overwrite history on the remote."),
    Rule("git_reset_hard", "git", "git reset --hard throws away uncommitted work."),
    Rule("git_clean_force", "git", "git clean -f deletes untracked files for good."),
    Rule("git_history_destroy", "git", "Rewrites or discards local history and uncommitted work."),
    Rule("repo_delete", "git", "Deletes a whole hosted repository."),
    # scheduled jobs / firewall
    Rule("crontab_remove", "system", "crontab -r deletes every scheduled job of the user."),
    Rule("firewall_flush", "network", "Flushes or disables the firewall."),
    # containers / clusters / cloud
    Rule("container_mass_delete", "cloud", "Deletes containers, volumes or images in bulk."),
    Rule("cluster_delete", "cloud", "Deletes a Kubernetes cluster, namespace or every resource of a kind."),
    Rule("infra_destroy", "cloud", "Destroys every resource managed by an infrastructure-as-code stack."),
    Rule("cloud_delete", "cloud", "Deletes cloud resources (buckets, projects, VMs, clusters or databases)."),
    Rule("vm_destroy", "cloud", "Destroys a virtual machine together with its storage."),
    Rule("workload_stop", "cloud", "Uninstalls, scales to zero or drains a running workload or node."),
    Rule("http_delete", "data", "Sends an HTTP DELETE for a whole index, bucket or store (or a wildcard over them)."),
    Rule("git_remote_delete", "git", "Deletes a branch or tag on the remote."),
    Rule("uid0_user", "system", "Creates or changes a user account to uid 0: a second root."),
    Rule("security_disable", "system", "Turns off a security control (SELinux enforcement, AppArmor, immutable bits)."),
    Rule("privilege_grant", "system", "Grants file capabilities to a program, so it runs with root powers."),
    Rule(
        "unknown_wrapper",
        "limits",
        "A program the gate does not know is given a dangerous command in its arguments, and may run it.",
    ),
    Rule("network_down", "network", "Takes the machine's network down or blocks all traffic: remote access is lost."),
    Rule("account_change", "system", "Changes who can log in or become root: passwords, sudo/wheel groups, root's shell."),
    Rule("kernel_change", "system", "Loads or unloads kernel modules, or changes kernel parameters."),
    Rule("unmount_system", "disk", "Unmounts, remounts read-only or unmaps a filesystem the running system depends on."),
    Rule("host_namespace_enter", "system", "Enters the host's namespaces (pid 1) from a container or as root."),
    # shells
    Rule("interactive_shell", "pty", "Opens an interactive shell; the gate cannot see what will be typed into it."),
    Rule("too_complex", "limits", "The command is too large or too deeply nested for the gate to analyse."),
    Rule("analysis_error", "limits", "The gate failed to analyse the command, so it asks instead of guessing."),
)

RULES: dict[str, Rule] = {r.id: r for r in _RULES}
DEFAULT_HARDLINE: frozenset[str] = frozenset(r.id for r in _RULES if r.hardline)


def reason_for(rule_id: str) -> str:
    """The default one-sentence reason of a rule id ("" for operator rules)."""
    rule = RULES.get(rule_id)
    return rule.reason if rule else ""
