"""How each tool reads its own options: one getopt spec per program, read by :func:`parse`.

The families judge a tool's options through ``commands.getopt`` with the tool's spec, so every
spelling the real parser accepts is read the same way: clustered short options (``rm -fr``,
``curl -sXDELETE``), attached values (``-XDELETE``, ``--request=DELETE``), options after operands
(``userdel bob -r``) and, where the parser takes them, unique prefixes of long options
(getopt_long: ``deluser --remove-hom``, ``mdadm --zero-superbloc``, ``pg_restore --clea``).
Go's pflag/cobra (docker, podman, kubectl) clusters short options but takes only whole long names,
so those specs say ``prefixes=False``: a spelling the tool rejects is not read as the option.

Each spec lists the tool's long options in full (a prefix is resolved only when it names exactly
one of them, as getopt_long does: ``--c`` of pg_restore is ambiguous between ``--clean`` and
``--create`` and the tool refuses it) and the options that take a value (so the value is not read
as an operand or as more options).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..commands import Parsed, getopt


@dataclass(frozen=True)
class Spec:
    """A tool's option grammar, as its parser reads it."""

    short_with_arg: str = ""
    longs: tuple[str, ...] = ()
    long_with_arg: tuple[str, ...] = ()
    prefixes: bool = True  # unique prefixes of long options (getopt_long, Getopt::Long, parse-options)
    permute: bool = True  # options after operands still count (GNU getopt_long, Getopt::Long)
    single_dash_long: bool = False  # ``-remove-home`` is ``--remove-home`` (Perl's Getopt::Long)
    long_only: bool = False  # getopt_long_only: ``-us`` is ``--user`` when it names a long option
    fold_case: bool = False  # option names are case-insensitive (Getopt::Long's default)
    short_optional_arg: str = ""  # letters whose value can only be attached
    old_style: bool = False  # tar: a first word without ``-`` is a bundle of keys (``xvIf CMD a.tar``)


def _w(text: str) -> tuple[str, ...]:
    return tuple(text.split())


# coreutils rm (srm and trash-put take the same recursive options)
_RM = Spec(longs=_w("--force --interactive --one-file-system --no-preserve-root --preserve-root --recursive --dir "
                    "--verbose --help --version"))

# Debian's adduser (Perl Getopt::Long: unique prefixes, ``-ingroup``, any case)
_ADDUSER = Spec(
    "c",
    _w("--add-extra-groups --add_extra_groups --allow-all-names --allow-badname --allow-bad-names --comment --conf "
       "--debug --disabled-login --disabled-password --firstgid --firstuid --force-badname --gecos --gid --group "
       "--help --home --ingroup --lastgid --lastuid --no-create-home --quiet --shell --system --uid --verbose "
       "--version"),
    _w("--comment --conf --firstgid --firstuid --gecos --gid --home --ingroup --lastgid --lastuid --shell --uid"),
    single_dash_long=True,
    fold_case=True,
)

# coreutils chmod/chown/chgrp
_CHOWN = Spec(
    short_with_arg="",
    longs=_w("--changes --silent --quiet --verbose --no-preserve-root --preserve-root --reference --recursive "
             "--dereference --no-dereference --from --help --version"),
    long_with_arg=_w("--reference --from"),
)

# curl 7.88 (``curl --help all``): its own parser clusters short options (``-sXDELETE``) and takes a
# unique prefix of a long one (``--manua``); ``--req`` is ambiguous with ``--request-target``.
_CURL = Spec(
    short_with_arg="EKCbcdDFPHmoUQreXYytzTuAwx",
    longs=_w(
    "--anyauth --append --basic --cert-status --compressed --compressed-ssh --create-dirs --crlf --digest "
    "--disable --disable-eprt --disable-epsv --disallow-username-in-url --doh-cert-status --doh-insecure --fail "
    "--fail-early --fail-with-body --false-start --form-escape --ftp-create-dirs --ftp-pasv --ftp-pret "
    "--ftp-skip-pasv-ip --ftp-ssl-ccc --ftp-ssl-control --get --globoff --haproxy-protocol --head --help "
    "--http0.9 --http1.0 --http1.1 --http2 --http2-prior-knowledge --http3 --http3-only --ignore-content-length "
    "--include --insecure --ipv4 --ipv6 --junk-session-cookies --list-only --location --location-trusted "
    "--mail-rcpt-allowfails --manual --metalink --negotiate --netrc --netrc-optional --next --no-alpn "
    "--no-buffer --no-clobber --no-keepalive --no-npn --no-progress-meter --no-sessionid --ntlm --ntlm-wb "
    "--parallel --parallel-immediate --path-as-is --post301 --post302 --post303 --progress-bar --proxy-anyauth "
    "--proxy-basic --proxy-digest --proxy-insecure --proxy-negotiate --proxy-ntlm --proxy-ssl-allow-beast "
    "--proxy-ssl-auto-client-cert --proxy-tlsv1 --proxytunnel --raw --remote-header-name --remote-name "
    "--remote-name-all --remote-time --remove-on-error --retry-all-errors --retry-connrefused --sasl-ir "
    "--show-error --silent --socks5-basic --socks5-gssapi --socks5-gssapi-nec --ssl --ssl-allow-beast "
    "--ssl-auto-client-cert --ssl-no-revoke --ssl-reqd --ssl-revoke-best-effort --sslv2 --sslv3 --styled-output "
    "--suppress-connect-headers --tcp-fastopen --tcp-nodelay --tftp-no-options --tlsv1 --tlsv1.0 --tlsv1.1 "
    "--tlsv1.2 --tlsv1.3 --tr-encoding --trace-time --use-ascii --verbose --version --xattr"
    ),
    long_with_arg=_w(
    "--abstract-unix-socket --alt-svc --aws-sigv4 --cacert --capath --cert --cert-type --ciphers --config "
    "--connect-timeout --connect-to --continue-at --cookie --cookie-jar --create-file-mode --crlfile --curves "
    "--data --data-ascii --data-binary --data-raw --data-urlencode --delegation --dns-interface --dns-ipv4-addr "
    "--dns-ipv6-addr --dns-servers --doh-url --dump-header --egd-file --engine --etag-compare --etag-save "
    "--expect100-timeout --form --form-string --ftp-account --ftp-alternative-to-user --ftp-method --ftp-port "
    "--ftp-ssl-ccc-mode --happy-eyeballs-timeout-ms --header --hostpubmd5 --hostpubsha256 --hsts --interface "
    "--json --keepalive-time --key --key-type --krb --libcurl --limit-rate --local-port --login-options "
    "--mail-auth --mail-from --mail-rcpt --max-filesize --max-redirs --max-time --netrc-file --noproxy "
    "--oauth2-bearer --output --output-dir --parallel-max --pass --pinnedpubkey --preproxy --proto "
    "--proto-default --proto-redir --proxy --proxy-cacert --proxy-capath --proxy-cert --proxy-cert-type "
    "--proxy-ciphers --proxy-crlfile --proxy-header --proxy-key --proxy-key-type --proxy-pass "
    "--proxy-pinnedpubkey --proxy-service-name --proxy-tls13-ciphers --proxy-tlsauthtype --proxy-tlspassword "
    "--proxy-tlsuser --proxy-user --proxy1.0 --pubkey --quote --random-file --range --rate --referer --request "
    "--request-target --resolve --retry --retry-delay --retry-max-time --sasl-authzid --service-name --socks4 "
    "--socks4a --socks5 --socks5-gssapi-service --socks5-hostname --speed-limit --speed-time --stderr "
    "--telnet-option --tftp-blksize --time-cond --tls-max --tls13-ciphers --tlsauthtype --tlspassword --tlsuser "
    "--trace --trace-ascii --unix-socket --upload-file --url --url-query --user --user-agent --write-out"
    ),
)

# GNU wget 1.21 (getopt_long)
_WGET = Spec(
    short_with_arg="eoaiBtOTwQPUlARDIX",
    longs=_w(
    "--adjust-extension --ask-password --auth-no-challenge --background --backup-converted "
    "--content-disposition --content-on-error --continue --convert-file-only --convert-links --debug "
    "--delete-after --follow-ftp --force-directories --force-html --ftps-clear-data-connection "
    "--ftps-fallback-to-ftp --ftps-implicit --ftps-resume-ssl --help --https-only --ignore-case --ignore-length "
    "--inet4-only --inet6-only --keep-session-cookies --mirror --no-cache --no-check-certificate --no-clobber "
    "--no-config --no-cookies --no-directories --no-dns-cache --no-glob --no-host-directories --no-hsts "
    "--no-http-keep-alive --no-if-modified-since --no-iri --no-netrc --no-parent --no-passive-ftp --no-proxy "
    "--no-remove-listing --no-use-server-timestamps --no-verbose --no-warc-compression --no-warc-digests "
    "--no-warc-keep-log --page-requisites --preserve-permissions --protocol-directories --quiet --random-wait "
    "--recursive --relative --retr-symlinks --retry-connrefused --save-headers --server-response "
    "--show-progress --span-hosts --spider --strict-comments --timestamping --trust-server-names --unlink "
    "--verbose --version --warc-cdx --xattr"
    ),
    long_with_arg=_w(
    "--accept --accept-regex --append-output --backups --base --bind-address --body-data --body-file "
    "--ca-certificate --ca-directory --certificate --certificate-type --ciphers --compression --config "
    "--connect-timeout --crl-file --cut-dirs --default-page --directory-prefix --dns-timeout --domains "
    "--exclude-directories --exclude-domains --execute --follow-tags --ftp-password --ftp-user --header "
    "--hsts-file --http-password --http-user --ignore-tags --include-directories --input-file --level "
    "--limit-rate --load-cookies --local-encoding --max-redirect --method --output-document --output-file "
    "--password --pinnedpubkey --post-data --post-file --prefer-family --private-key --private-key-type "
    "--progress --proxy-password --proxy-user --quota --read-timeout --referer --regex-type --reject "
    "--reject-regex --rejected-log --remote-encoding --report-speed --restrict-file-names --retry-on-http-error "
    "--save-cookies --secure-protocol --start-pos --timeout --tries --use-askpass --user --user-agent --wait "
    "--waitretry --warc-dedup --warc-file --warc-header --warc-max-size --warc-tempdir"
    ),
)

# GNU tar 1.34 (argp: unique prefixes ``--to-comm``, ``--use-comp``; the old-style first word)
_TAR = Spec(
    short_with_arg="CFHIKLNTVXbfg",
    longs=_w(
        "--absolute-names --acls --anchored --append --atime-preserve --auto-compress --backup --block-number "
        "--bzip2 --catenate --check-device --check-links --checkpoint --clamp-mtime --compare --compress "
        "--concatenate --confirmation --create --delay-directory-restore --delete --dereference --diff "
        "--exclude-backups --exclude-caches --exclude-caches-all --exclude-caches-under --exclude-vcs "
        "--exclude-vcs-ignores --extract --force-local --full-time --get --gunzip --gzip --hard-dereference --help "
        "--ignore-case --ignore-command-error --ignore-failed-read --ignore-zeros --incremental --interactive "
        "--keep-directory-symlink --keep-newer-files --keep-old-files --list --lzip --lzma --lzop --multi-volume "
        "--no-acls --no-anchored --no-auto-compress --no-check-device --no-delay-directory-restore --no-ignore-case "
        "--no-ignore-command-error --no-null --no-overwrite-dir --no-recursion --no-same-owner "
        "--no-same-permissions --no-seek --no-selinux --no-unquote --no-verbatim-files-from --no-wildcards "
        "--no-wildcards-match-slash --no-xattrs --null --numeric-owner --occurrence --old-archive --one-file-system "
        "--one-top-level --overwrite --overwrite-dir --portability --posix --preserve-order --preserve-permissions "
        "--read-full-records --recursion --recursive-unlink --remove-files --restrict --same-order --same-owner "
        "--same-permissions --seek --selinux --show-defaults --show-omitted-dirs --show-snapshot-field-ranges "
        "--show-stored-names --show-transformed-names --skip-old-files --sparse --test-label --to-stdout --totals "
        "--touch --uncompress --ungzip --unlink-first --unquote --update --usage --utc --verbatim-files-from "
        "--verbose --verify --version --wildcards --wildcards-match-slash --xattrs --xz --zstd"
    ),
    long_with_arg=_w(
        "--add-file --after-date --blocking-factor --checkpoint-action --directory --exclude --exclude-from "
        "--exclude-ignore --exclude-ignore-recursive --exclude-tag --exclude-tag-all --exclude-tag-under --file "
        "--files-from --format --group --group-map --hole-detection --index-file --info-script --label --level "
        "--listed-incremental --mode --mtime --new-volume-script --newer --newer-mtime --no-quote-chars --owner "
        "--owner-map --pax-option --quote-chars --quoting-style --record-size --rmt-command --rsh-command --sort "
        "--sparse-version --starting-file --strip-components --suffix --tape-length --to-command --transform "
        "--use-compress-program --volno-file --warning --xattrs-exclude --xattrs-include --xform"
    ),
    old_style=True,
)

SPECS: dict[str, Spec] = {
    "tar": _TAR,
    "gtar": _TAR,
    "rm": _RM,
    "srm": _RM,
    "trash-put": _RM,
    "chmod": _CHOWN,
    "chown": _CHOWN,
    "chgrp": _CHOWN,
    "chcon": Spec(
        "urtl",
        _w("--dereference --no-dereference --user --role --type --range --no-preserve-root --preserve-root "
           "--reference --recursive --verbose --help --version"),
        _w("--user --role --type --range --reference"),
    ),
    # acl's setfacl (getopt_long; ``--re`` is ambiguous: --remove, --remove-all, --recursive, --restore)
    "setfacl": Spec(
        "mMxX",
        _w("--modify --modify-file --remove --remove-file --remove-all --remove-default --set --set-file --mask "
           "--no-mask --default --recursive --logical --physical --restore --test --version --help"),
        _w("--modify --modify-file --remove --remove-file --set --set-file --restore"),
    ),
    # shadow's userdel (getopt_long)
    "userdel": Spec("RP", _w("--force --help --remove --root --prefix --selinux-user"), _w("--root --prefix")),
    # shadow's useradd and usermod (getopt_long)
    "useradd": Spec(
        "bcdefgGkKpRPsuZ",
        _w("--badname --base-dir --btrfs-subvolume-home --comment --home-dir --defaults --expiredate --inactive "
           "--add-subids-for-system --gid --groups --help --skel --key --no-log-init --create-home --no-create-home "
           "--no-user-group --non-unique --password --system --root --prefix --shell --uid --user-group "
           "--selinux-user --selinux-range"),
        _w("--base-dir --comment --home-dir --expiredate --inactive --gid --groups --skel --key --password --root "
           "--prefix --shell --uid --selinux-user --selinux-range"),
    ),
    "usermod": Spec(
        "cdefgGlpPRsuvVwWZ",
        _w("--append --badname --comment --home --expiredate --inactive --gid --groups --help --login --lock "
           "--move-home --non-unique --password --prefix --remove --root --shell --uid --unlock --add-subuids "
           "--del-subuids --add-subgids --del-subgids --selinux-user --selinux-range"),
        _w("--comment --home --expiredate --inactive --gid --groups --login --password --prefix --root --shell --uid "
           "--add-subuids --del-subuids --add-subgids --del-subgids --selinux-user --selinux-range"),
    ),
    # Debian's adduser/addgroup (Perl Getopt::Long, as deluser)
    "adduser": _ADDUSER,
    "addgroup": _ADDUSER,
    # Debian's deluser (Perl Getopt::Long: prefixes, ``-remove-home``, any case)
    "deluser": Spec(
        "c",
        _w("--quiet --debug --verbose --version --help --group --conf --system --only-if-empty --remove-home "
           "--remove-all-files --backup --backup-to --backup-suffix --no-preserve-root"),
        _w("--conf --backup-to --backup-suffix"),
        single_dash_long=True,
        fold_case=True,
    ),
    # util-linux wipefs
    "wipefs": Spec(
        "otO",
        _w("--all --backup --force --help --json --lock --noheadings --no-act --offset --output --parsable --quiet "
           "--types --version"),
        _w("--offset --output --types"),
    ),
    # mdadm (ReadMe.c: getopt_long over its long_options)
    "mdadm": Spec(
        "ZcilpmnxudzUNek",
        _w("--manage --misc --assemble --build --create --detail --examine --follow --monitor --grow --incremental "
           "--zero-superblock --query --examine-bitmap --auto-detect --detail-platform --kill-subarray "
           "--update-subarray --udev-rules --offroot --udev --examine-badblocks --dump --restore --help "
           "--help-options --version --verbose --quiet --chunk --rounding --level --parity --layout --raid-disks "
           "--raid-devices --spare-disks --spare-devices --size --auto --assume-clean --write-zeroes --metadata "
           "--bitmap --bitmap-chunk --write-behind --write-mostly --failfast --nofailfast --re-add --homehost "
           "--data-offset --nodes --home-cluster --write-journal --consistency-policy --logical-block-size --uuid "
           "--super-minor --name --config --scan --force --update --add --add-spare --add-journal --remove --fail "
           "--set-faulty --replace --with --run --stop --readonly --readwrite --no-degraded --wait --wait-clean "
           "--action --cluster-confirm --brief --no-devices --export --sparc2.2 --test --prefer --mail --program "
           "--alert --increment --delay --daemonise --daemonize --oneshot --pid-file --syslog --no-sharing "
           "--backup-file --invalid-backup --array-size --continue --rebuild-map --path"),
        _w("--kill-subarray --update-subarray --dump --restore --chunk --rounding --level --parity --layout "
           "--raid-disks --raid-devices --spare-disks --spare-devices --size --auto --metadata --bitmap "
           "--bitmap-chunk --homehost --data-offset --nodes --home-cluster --write-journal --consistency-policy "
           "--logical-block-size --uuid --super-minor --name --config --update --action --prefer --mail --program "
           "--alert --increment --delay --pid-file --backup-file --array-size --path"),
    ),
    # PostgreSQL 15 pg_restore (getopt_long ``acCd:ef:F:h:I:j:lL:n:N:Op:P:RsS:t:T:U:vwWx1``)
    "pg_restore": Spec(
        "dfFhIjLnNpPStTU",
        _w("--clean --create --data-only --dbname --exit-on-error --file --format --host --index --jobs --list "
           "--use-list --no-owner --no-reconnect --no-privileges --no-acl --port --function --schema "
           "--exclude-schema --superuser --table --trigger --username --verbose --single-transaction --password "
           "--no-password --role --disable-triggers --enable-row-security --if-exists --no-comments "
           "--no-data-for-failed-tables --no-publications --no-security-labels --no-subscriptions "
           "--no-table-access-method --no-tablespaces --section --strict-names --use-set-session-authorization "
           "--schema-only --help --version"),
        _w("--dbname --file --format --host --index --jobs --use-list --schema --exclude-schema --port --function "
           "--superuser --table --trigger --username --role --section"),
    ),
    # procps-ng pkill (pgrep.c; the signal word ``-9``/``-HUP`` is taken out first)
    "pkill": Spec(
        "qgGOPstuUFrd",
        _w("--signal --queue --echo --count --full --pgroup --group --ignore-case --newest --oldest --older --parent "
           "--session --terminal --euid --uid --exact --pidfile --logpidfile --runstates --ignore-ancestors --cgroup "
           "--ns --nslist --inverse --lightweight --list-name --list-full --delimiter --require-handler --env "
           "--help --version"),
        _w("--signal --queue --pgroup --group --older --parent --session --terminal --euid --uid --pidfile "
           "--runstates --cgroup --ns --nslist --delimiter --env"),
    ),
    # psmisc killall (getopt_long_only ``egy:o:ilqrs:u:vwZ:VIn:``: ``-user alice``, ``-us alice`` are --user)
    "killall": Spec(
        "yosunZ",
        _w("--exact --ignore-case --process-group --younger-than --older-than --interactive --list-signals --quiet "
           "--regexp --signal --user --verbose --wait --ns --context --version"),
        _w("--younger-than --older-than --signal --user --ns --context"),
        long_only=True,
    ),
    # systemd systemctl (getopt_long, ``systemctl --help`` of 252 and the hidden --irreversible/--fail kind)
    "systemctl": Spec(
        "HMtpPsno",
        _w("--help --version --system --user --host --machine --type --state --failed --property --all --full "
           "--recursive --reverse --with-dependencies --job-mode --show-transaction --show-types --value "
           "--check-inhibitors --kill-whom --signal --what --now --dry-run --quiet --wait --no-block --no-wall "
           "--no-reload --legend --no-pager --no-ask-password --global --runtime --force --preset-mode --root "
           "--image --lines --output --firmware-setup --boot-loader-menu --boot-loader-entry --plain --timestamp "
           "--read-only --mkdir --marked --no-warn --kill-value --message --when --irreversible --ignore-dependencies "
           "--fail --ignore-inhibitors --no-legend --after --before --image-policy"),
        _w("--host --machine --type --state --property --job-mode --check-inhibitors --kill-whom --signal --what "
           "--legend --preset-mode --root --image --lines --output --boot-loader-menu --boot-loader-entry "
           "--timestamp --kill-value --message --when --image-policy"),
    ),
    # util-linux rtcwake
    "rtcwake": Spec(
        "Admst",
        _w("--adjfile --auto --date --device --dry-run --local --list-modes --mode --seconds --time --utc --verbose "
           "--help --version"),
        _w("--adjfile --date --device --mode --seconds --time"),
    ),
    # util-linux umount, swapoff, losetup
    "umount": Spec(
        "OtN",
        _w("--all --all-targets --no-canonicalize --detach-loop --fake --force --internal-only --no-mtab --lazy "
           "--test-opts --recursive --read-only --types --verbose --quiet --namespace --help --version"),
        _w("--test-opts --types --namespace"),
    ),
    "swapoff": Spec("LU", _w("--all --verbose --help --version")),
    "losetup": Spec(
        "cjoObd",
        _w("--all --detach --detach-all --find --set-capacity --associated --nooverlap --offset --sizelimit "
           "--sector-size --partscan --read-only --direct-io --show --verbose --json --list --noheadings --output "
           "--output-all --raw --help --version"),
        _w("--detach --set-capacity --associated --offset --sizelimit --sector-size --output"),
    ),
    # efibootmgr (getopt_long; the options of efibootmgr(8))
    "efibootmgr": Spec(
        "bdeEilLMmnopt@",
        _w("--active --inactive --bootnum --delete-bootnum --create --create-only --disk --remove-dups --edd "
           "--device --reconnect --no-reconnect --gpt --iface --loader --label --mirror-above-4G "
           "--mirror-below-4G --bootnext --delete-bootnext --bootorder --delete-bootorder --part --quiet --driver "
           "--timeout --delete-timeout --unicode --verbose --version --write-signature --sysprep "
           "--append-binary-args --help --full-dev-path --file-dev-path"),
        _w("--bootnum --disk --edd --device --iface --loader --label --mirror-above-4G --mirror-below-4G "
           "--bootnext --bootorder --part --timeout --append-binary-args"),
        short_optional_arg="v",
    ),
    "curl": _CURL,
    "curlie": _CURL,
    "wget": _WGET,
}


def parse(name: str, args: list[str]) -> Parsed:
    """``args`` of the program ``name`` read as its own parser reads them (see :data:`SPECS`)."""
    s = SPECS[name]
    if s.old_style and args and not args[0].startswith("-"):
        # ``tar xvCf / a.tar``: each key is an option; those taking a value take the next words in order
        keys, rest = args[0], list(args[1:])
        args = []
        for ch in keys:
            args.append("-" + ch)
            if ch in s.short_with_arg and rest:
                args.append(rest.pop(0))
        args += rest
    if s.fold_case:
        args = [a.lower() if a.startswith("-") else a for a in args]
    return getopt(args, s.short_with_arg, s.longs, s.long_with_arg, permute=s.permute,
                  single_dash_long=s.single_dash_long, short_optional_arg=s.short_optional_arg,
                  long_prefix=s.prefixes, long_only=s.long_only)


def setcap_sets(args: list[str]) -> bool:
    """Whether libcap's ``setcap`` sets capabilities on a file.  It reads its words in one loop, not by
    getopt: ``-q``, ``-n ROOTID`` and ``-v`` (verify, not set: for the pairs after it) anywhere, and pairs
    of ``CAPS FILE`` where ``-r`` as CAPS removes.  So ``setcap cap_setuid+ep f -v`` sets f before ``-v``
    and ``setcap -r a cap_setuid+ep b`` removes a's and sets b's."""
    verify = False
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-h", "--license"):
            return False  # usage or license, then exit
        if a in ("-q", "-v", "-n"):
            verify = verify or a == "-v"
            i += 2 if a == "-n" else 1
            continue
        if i + 1 >= len(args):
            return False  # CAPS without a FILE: usage, exit
        if not verify and a != "-r":
            return True
        i += 2
    return False
