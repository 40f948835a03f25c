"""Data stores: destructive SQL through any client, ``dropdb`` and framework drop/flush tasks,
Redis flushes and scan-then-delete loops, Mongo drops, restores that overwrite or drop objects
first, HTTP DELETE of whole indexes and buckets.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .. import inline
from ..commands import (
    base_name,
    has_opt,
    opt_values,
    split_options,
)
from ..model import UNKNOWN, Cmd, Kinds
from .base import Ctx, Examples, _opt_value, also, handles
from .options import parse
from .remote import _stdin_texts, judge_script

if TYPE_CHECKING:
    from ..detect import Detector


# -- data stores


_SQL_CLIENTS = {
    "psql": ({"-c", "--command"}, {"-f", "--file"}),
    "mysql": ({"-e", "--execute"}, set()),
    "mariadb": ({"-e", "--execute"}, set()),
    "sqlite3": (set(), set()),
    "sqlite": (set(), set()),
    "duckdb": ({"-c", "-s"}, set()),
    "clickhouse-client": ({"-q", "--query"}, set()),
    "clickhouse": ({"-q", "--query"}, set()),
    "clickhouse-local": ({"-q", "--query"}, set()),
    "cqlsh": ({"-e", "--execute"}, set()),
    "sqlcmd": ({"-Q", "-q", "--query"}, set()),
    "usql": ({"-c", "--command"}, set()),
    "mycli": ({"-e", "--execute"}, set()),
    "pgcli": ({"-c"}, set()),
    "litecli": ({"-e"}, set()),
    "cockroach": ({"-e", "--execute"}, set()),
    "snowsql": ({"-q", "--query"}, set()),
    "spark-sql": ({"-e"}, set()),
    "hive": ({"-e"}, set()),
    "beeline": ({"-e"}, set()),
    "trino": ({"--execute"}, set()),
    "presto": ({"--execute"}, set()),
    "odpscmd": ({"-e"}, set()),
    "vsql": ({"-c", "--command"}, set()),
    "db2": (set(), set()),
    "sqlplus": (set(), set()),
    "isql": (set(), set()),
    "influx": ({"-execute", "--execute"}, set()),
    "bq": (set(), set()),
    "mysqlsh": ({"-e", "--execute", "--sql"}, set()),
    "tsql": (set(), set()),
    "osqueryi": (set(), set()),
    "ysqlsh": ({"-c", "--command"}, set()),
    "gsql": ({"-c"}, set()),
    "psql-wrapper": ({"-c"}, set()),
    "sqlite-utils": (set(), set()),
    "csvsql": ({"--query"}, set()),
    "dolt": ({"-q", "--query"}, set()),
    "surreal": (set(), set()),
    "edgedb": (set(), set()),
    "turso": (set(), set()),
}


@handles(*_SQL_CLIENTS)
def _h_sql(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """SQL clients (psql, mysql, sqlite3, …): the statements they are given by flag, file, heredoc,
    here-string or pipe are parsed for DROP/TRUNCATE and for DELETE/UPDATE without a real WHERE;
    string literals and comments are text."""
    code_flags, _ = _SQL_CLIENTS[name]
    if (
        name == "bq"
        and args[:1] in (["rm"], ["remove"])
        and any(a in ("-r", "-d", "--dataset", "--recursive", "-t", "--table") for a in args)
    ):
        d.add(ctx, "cloud_delete", cmd.text, "bq rm deletes a BigQuery dataset or table.")
    texts: list[str] = []
    for i, a in enumerate(args):
        if a in code_flags and i + 1 < len(args):
            texts.append(args[i + 1])
        elif "=" in a and a.split("=", 1)[0] in code_flags:
            texts.append(a.split("=", 1)[1])
        elif re.match(r"^-[ce].+", a) and a[:2] in code_flags:
            texts.append(a[2:])
        elif re.fullmatch(r"-[a-zA-Z]{2,}", a) and "-" + a[-1] in code_flags and i + 1 < len(args):
            texts.append(args[i + 1])  # a cluster ending in the code flag: ``psql -Xc 'DROP …'``
        elif re.fullmatch(r"--[a-z][\w-]{3,}(=.*)?", a) and a not in code_flags:
            # a unique prefix of a long code flag (getopt_long; mysql's own option parser too): ``--exec``
            head, eq, value = a.partition("=")
            longs = [f for f in code_flags if f.startswith("--") and f.startswith(head)]
            if len(longs) == 1:
                texts.append(value if eq else (args[i + 1] if i + 1 < len(args) else ""))
    if name in ("sqlite3", "sqlite", "duckdb", "bq", "db2", "sqlite-utils", "turso", "dolt", "mysqlsh", "influx"):
        texts.extend(a for a in args if not a.startswith("-") and " " in a)
    texts.extend(_stdin_texts(cmd))
    for t in texts:
        found = inline.sql_findings(t)
        for f in found:
            d.add(ctx, f.rule, cmd.text, f"Destructive SQL that drops or wipes data: {f.detail[:80]}")
        if not found:
            why = sql_more(t)
            if why:
                d.add(ctx, "sql_destructive", cmd.text, why)
    if name in ("psql", "cockroach", "yugabyte-psql", "ysqlsh", "mysqlsh", "duckdb", "clickhouse-client"):
        for path in _opt_value(args, "-f", "--file"):  # a file of statements: read from the backend
            if path not in ("-",):
                judge_script(d, path, frozenset(), cmd, ctx, "sql")


@handles("dropdb", "dropuser", "mongo-drop", "dropdb.exe", "pg_resetwal", "pg_resetxlog")
def _h_dropdb(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``dropdb``/``dropuser`` and WAL resets: a whole database (or its consistency) is gone."""
    if name.startswith("pg_reset") and "-n" in args:
        return
    d.add(ctx, "db_drop", cmd.text, f"{name} drops a database.")


@handles("redis-cli", "valkey-cli", "keydb-cli", "memtier", "dragonfly-cli")
def _h_redis(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Redis-like clients: ``FLUSHALL``/``FLUSHDB`` (every key) and ``SHUTDOWN`` (the server), as arguments
    or fed on stdin."""
    _, ops = split_options(
        args,
        {
            "-h",
            "-p",
            "-a",
            "-n",
            "-u",
            "-s",
            "-r",
            "-i",
            "-d",
            "--user",
            "--pass",
            "--askpass",
            "--tls",
            "--cacert",
            "--cert",
            "--key",
            "--sni",
            "-e",
            "--pattern",
            "--count",
            "--quoted-pattern",
            "--rdb",
            "--functions-rdb",
            "--eval",
            "--memkeys-samples",
            "-D",
            "--lru-test",
            "--intrinsic-latency",
            "--pipe-timeout",
        },
    )
    words = [o.lower() for o in ops[:3]]
    if words[:1] and words[0] in ("flushall", "flushdb"):
        d.add(ctx, "redis_flush", cmd.text)
    elif words[:1] == ["shutdown"] or words[:2] == ["debug", "segfault"] or words[:2] == ["debug", "crash-and-recover"]:
        d.add(ctx, "service_stop", cmd.text, f"redis {' '.join(words[:2])} stops or crashes the server.")
    elif words[:2] in (["function", "flush"], ["script", "flush"]):
        d.add(ctx, "redis_flush", cmd.text, f"{' '.join(words[:2]).upper()} deletes every stored function or script.")
    elif words[:2] == ["config", "set"] and words[2:3] in (["dir"], ["dbfilename"]):
        d.add(ctx, "system_write", cmd.text, "CONFIG SET dir/dbfilename lets the server write its dump anywhere.")
    elif words[:1] and words[0] in ("eval", "evalsha", "eval_ro", "fcall") and any(
        re.search(r"(?i)redis\.(?:p?call)\s*\(\s*['\"](?:flushall|flushdb|shutdown)", a) for a in ops[1:2]
    ):
        d.add(ctx, "redis_flush", cmd.text, "The Lua script flushes the database or stops the server.")
    for t in _stdin_texts(cmd):
        if re.search(r"(?im)^\s*(flushall|flushdb)\b", t):
            d.add(ctx, "redis_flush", cmd.text)


_SQL_COMMENT = re.compile(r"--[^\n]*|/\*.*?\*/", re.S)
_WHERE = re.compile(r"(?is)\bWHERE\s+(.*?)\s*(?:\bRETURNING\b|\bLIMIT\b|\bORDER\s+BY\b|\)\s*SELECT\b|;|$)")


def _always_true(cond: str) -> bool:
    """A WHERE condition true for every row, as far as plain reading shows: constants compared
    (``1 <> 2``, ``2 > 1``, ``'a' = 'a'``, ``1 IN (1)``), ``TRUE AND TRUE``, ``'x' LIKE '%'``,
    ``x IS NULL OR x IS NOT NULL``, ``EXISTS (SELECT 1)``, ``COALESCE(NULL, TRUE)``."""
    c = " ".join(cond.split()).upper().strip()
    while c.startswith("(") and c.endswith(")") and c.count("(") == c.count(")"):
        c = c[1:-1].strip()
    ors = re.split(r"\s+OR\s+", c)
    if len(ors) > 1:
        m = re.fullmatch(r"(\w+) IS (NOT )?NULL OR \1 IS (NOT )?NULL", c)
        return bool(m and bool(m.group(2)) != bool(m.group(3))) or any(_always_true(o) for o in ors)
    ands = re.split(r"\s+AND\s+", c)
    if len(ands) > 1 and not re.search(r"\bBETWEEN\b", c):
        return all(_always_true(a) for a in ands)
    m = re.fullmatch(r"(-?\d+(?:\.\d+)?)\s*(<>|!=|>=|<=|=|>|<)\s*(-?\d+(?:\.\d+)?)", c)
    if m:
        a, op, b = float(m.group(1)), m.group(2), float(m.group(3))
        return {"<>": a != b, "!=": a != b, ">=": a >= b, "<=": a <= b, "=": a == b, ">": a > b, "<": a < b}[op]
    return bool(
        re.fullmatch(r"TRUE|1|NOT FALSE|NOT 0|'([^']*)' ?= ?'\1'|'[^']*' (?:I?LIKE) '%+'|(-?\d+) IN \( ?\2 ?(?:,[^)]*)?\)"
                     r"|EXISTS ?\( ?SELECT 1 ?\)|COALESCE ?\( ?NULL ?, ?(?:TRUE|1) ?\)|(\w+) = \3", c)
    )


def sql_more(text: str) -> str:
    """Destructive SQL the shared reader misses: a DELETE/UPDATE whose WHERE is true for every row
    (or a DELETE without WHERE inside a CTE), ``id IN (SELECT id FROM same_table)``, dynamic SQL
    built from pieces (``EXECUTE 'DR' || 'OP …'``, ``PREPARE … FROM CONCAT(…)``), and
    ``pg_terminate_backend`` over every session.  Returns why, or ""."""
    t = _SQL_COMMENT.sub(" ", text)
    for stmt in re.split(r";(?=(?:[^']*'[^']*')*[^']*$)", t):
        s = " ".join(stmt.split())
        u = s.upper()
        dm = re.search(r"\b(DELETE\s+FROM|UPDATE)\s+([\w.\"]+)", u)
        if dm:
            rest = u[dm.end() :]
            w = _WHERE.search(rest)
            if w is None and re.search(r"\(\s*DELETE\b", u):
                return f"A DELETE without WHERE inside a statement empties {dm.group(2)}: {s[:80]}"
            if w is not None and _always_true(w.group(1)):
                return f"The WHERE clause is true for every row: {s[:80]}"
            if w is not None and re.fullmatch(
                r"\s*(\w+)\s+IN\s*\(\s*SELECT\s+\1\s+FROM\s+" + re.escape(dm.group(2)) + r"\s*\)\s*", w.group(1)
            ):
                return f"The WHERE clause selects every row of the table: {s[:80]}"
        if re.search(r"\bEXECUTE\b\s*(?:'[^']*'\s*\|\||FORMAT\s*\(|\w+\s*\|\|)|\bPREPARE\s+\w+\s+FROM\s+CONCAT\s*\(", u):
            return f"Dynamic SQL built from pieces runs statements the gate cannot read: {s[:80]}"
        if "PG_TERMINATE_BACKEND" in u and "PG_STAT_ACTIVITY" in u and "WHERE" not in u:
            return "Terminates every database session."
    return ""


@handles("mongo", "mongosh", "mongodb")
def _h_mongo(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Mongo shells: their ``--eval`` code and stdin are judged for ``dropDatabase()``, ``.drop()`` and
    ``deleteMany({})`` by the SQL/data readers."""
    texts = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--eval"] + _stdin_texts(cmd)
    texts += [a.split("=", 1)[1] for a in args if a.startswith("--eval=")]
    for t in texts:
        found = inline.mongo_findings(t)
        for f in found:
            d.add(ctx, f.rule, cmd.text)
        m = None if found else _MONGO_MORE.search(t)
        if m:
            d.add(ctx, "mongo_drop", cmd.text, f"The Mongo code {m.group(0)[:60]} drops or empties data, or stops the server.")


# Mongo spellings the shared reader misses: always-true filters, remove({}, …), bulk deletes with an
# empty filter, dropDatabase/drop/shutdown through runCommand/adminCommand.
_MONGO_MORE = re.compile(
    r"\.(?:deleteMany|remove)\s*\(\s*\{\s*(?:\w+\s*:\s*\{\s*\$(?:exists\s*:\s*(?:true|1)|ne\s*:\s*(?:null|-1))\s*\}\s*)?\}\s*[,)]"
    r"|deleteMany\s*:\s*\{\s*filter\s*:\s*\{\s*\}"
    r"|\.(?:runCommand|adminCommand)\s*\(\s*\{\s*['\"]?(?:dropDatabase|drop|shutdown|dropAllUsersFromDatabase|dropAllRolesFromDatabase)['\"]?\s*:"
)


@handles(
    "rails",
    "rake",
    "bin/rails",
    "artisan",
    "console.php",
    "manage.py",
    "django-admin",
    "prisma",
    "sequelize",
    "mix",
    "wp",
    "knex",
    "typeorm",
    "drizzle-kit",
    "alembic",
    "flask",
    "symfony",
    "console",
)
def _h_framework_db(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Framework database tasks that drop or empty a database (``rails db:drop``, ``artisan migrate:fresh``,
    ``manage.py flush``, ``prisma migrate reset``)."""
    ops = [a for a in args if not a.startswith("-")]
    joined = " ".join(ops[:3])
    if re.search(
        r"\bdb:(drop|reset|purge|schema:load|migrate:reset|wipe)\b|\bmigrate:(fresh|reset)\b|\bdb:wipe\b|\bdb:migrate:undo:all\b|\becto\.(drop|reset)\b|\bdoctrine:(database|schema):drop\b",
        joined,
    ):
        d.add(ctx, "db_drop", cmd.text)
    elif (
        name in ("manage.py", "django-admin")
        and ops[:1] in (["flush"], ["reset_db"], ["sqlflush"])
        and ops[0] != "sqlflush"
    ):
        d.add(ctx, "db_drop", cmd.text)
    elif name == "prisma" and (ops[:2] == ["migrate", "reset"] or "--force-reset" in args):
        d.add(ctx, "db_drop", cmd.text)
    elif name == "wp" and ops[:2] in (["db", "reset"], ["db", "drop"], ["db", "clean"], ["site", "empty"]):
        d.add(ctx, "db_drop", cmd.text)
    elif name == "typeorm" and ops[:1] == ["schema:drop"]:
        d.add(ctx, "db_drop", cmd.text)
    elif name == "drizzle-kit" and ops[:1] == ["drop"]:
        d.add(ctx, "db_drop", cmd.text)
    elif name == "alembic" and ops[:2] == ["downgrade", "base"]:
        d.add(ctx, "db_drop", cmd.text)
    elif name == "knex" and ops[:1] == ["migrate:rollback"] and "--all" in args:
        d.add(ctx, "db_drop", cmd.text)


@handles(
    "gitlab-backup",
    "gitlab-rake",
    "neo4j-admin",
    "pg_restore",
    "mongorestore",
    "influxd",
    "etcdctl",
    "arangorestore",
    "cbrestore",
    "mysqlpump",
    "dgraph",
    "rethinkdb",
)
def _h_data_restore(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Restores over a live store (``gitlab-backup restore``, ``mongorestore --drop``, ``etcdctl snapshot
    restore``…): the current contents are replaced."""
    hit = (name == "gitlab-backup" and "restore" in args) or (
        name == "gitlab-rake" and any("backup:restore" in a for a in args)
    )
    hit = hit or (
        name == "neo4j-admin"
        and any(a.startswith("--overwrite-destination") and not a.endswith("=false") or a == "--force" for a in args)
    )
    hit = hit or (
        name == "etcdctl"
        and "del" in args
        and any(a in ("--prefix", "--from-key") for a in args)
        and any(a in ('""', "", "/", "\x00") for a in args)
    )
    hit = hit or (name == "arangorestore" and "--overwrite" in args and "true" in args)
    hit = hit or (name == "mongorestore" and any(a in ("--drop", "--drop=true") for a in args))
    if hit:
        d.add(ctx, "data_restore_overwrite", cmd.text)


# -- data: restores that drop objects first


@also("pg_restore")
def _h_pg_restore(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``pg_restore --clean``/``-c`` drops every object before recreating it (``-l`` only lists).

    must match: ``pg_restore --clean -d prod x.dump``, ``pg_restore -cd app x``;
    must not: ``pg_restore -l x.dump``, ``pg_restore -d dev x.dump``."""
    p = parse(name, args)
    if has_opt(p, "-l", "--list"):
        return
    if has_opt(p, "-c", "--clean"):
        d.add(ctx, "data_restore_overwrite", cmd.text, "pg_restore --clean drops every object of the database first.")


# -- data: HTTP DELETE of whole stores


_URL = re.compile(r"^(?:[a-z][a-z0-9+.-]*://)?[A-Za-z0-9_.\-\[\]:@]+(?::\d+)?(/[^?#]*)?")


def _http_delete_target(url: str) -> bool:
    """A DELETE that names a whole index/bucket/store: at most one path segment, a wildcard or ``_all``."""
    if "://" not in url and not re.match(r"^[\w.-]+:\d+(/|$)", url) and not url.startswith(("localhost", "/")):
        return False
    m = _URL.match(url.split("?", 1)[0])
    path = (m.group(1) if m else "") or "/"
    segs = [s for s in path.split("/") if s]
    return len(segs) <= 1 or any(("*" in s or s in ("_all", "_data_stream", "*")) for s in segs) or UNKNOWN in path


@also("curl", "wget", "http", "https", "xh", "curlie")
def _h_http_delete(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """An HTTP DELETE of an Elasticsearch/OpenSearch index, an S3/MinIO bucket or a store root.

    must match: ``curl -X DELETE http://es:9200/logs-*``, ``curl -XDELETE localhost:9200/_all``,
    ``http DELETE :9200/idx``; must not: ``curl -X DELETE http://api/items/42``, ``curl -X GET es:9200/x``."""
    urls = [a for a in args if not a.startswith("-") and a.upper() != "DELETE" and ("/" in a or ":" in a)]
    if name in ("curl", "curlie", "wget"):  # read as their parsers do: ``-sXDELETE``, ``--method=DELETE``
        p = parse(name, args)
        methods = opt_values(p, "-X", "--request", "--method")
        urls = [a for a in p[1] + opt_values(p, "--url") if "/" in a or ":" in a]
    else:
        methods = [a for a in args[:3] if a.isupper()]
    if any(re.search(r"/_delete_by_query\b", a) for a in args) and (
        any("match_all" in a for a in args) or not _opt_value(args, "-d", "--data") + _opt_value(args, "", "--data-raw")
    ):
        d.add(ctx, "http_delete", cmd.text, "_delete_by_query with match_all (or no query) deletes every document of the index.")
        return
    if not any(m.upper() == "DELETE" for m in methods):
        return
    if any(_http_delete_target(u) for u in urls):
        d.add(ctx, "http_delete", cmd.text)


# -- data: stores that are not SQL (key/value, secrets, time series, brokers): their drops and truncates


def _go_flag(args: list[str], *names: str) -> bool:
    """A Go-style boolean flag (``-recurse``, ``--recurse``, ``-recurse=true``) as consul/vault/influx read them."""
    for a in args:
        name, eq, value = a.lstrip("-").partition("=")
        if a.startswith("-") and name in names and (not eq or value.lower() in ("true", "1", "t")):
            return True
    return False


def _store_drop(name: str, args: list[str]) -> str:
    """Why a store's own CLI drops or empties a whole keyspace, bucket, topic, queue or engine ('' if not):
    the non-SQL counterparts of ``DROP``/``TRUNCATE`` and ``FLUSHALL``."""
    ops = [a for a in args if not a.startswith("-")]
    low = [o.lower() for o in ops]
    if name == "consul" and low[:2] == ["kv", "delete"] and _go_flag(args, "recurse"):
        return "consul kv delete -recurse deletes every key under the prefix"
    if name == "vault" and (low[:2] in (["secrets", "disable"], ["secrets", "unmount"]) or low[:1] == ["unmount"]):
        return "vault secrets disable unmounts a secrets engine: every secret stored in it is deleted"
    if name == "influx":
        if low[:2] in (["bucket", "delete"], ["org", "delete"]):
            return f"influx {low[0]} delete deletes the {low[0]} and every point in it"
        if low[:1] == ["delete"] and not any(a in ("-p", "--predicate") or a.startswith("--predicate=") for a in args):
            return "influx delete without a predicate deletes every point of the time range"
    if name.removesuffix(".sh") in ("zookeeper-shell", "zkCli", "zk-shell", "zkcli"):
        if any(w in ("deleteall", "rmr") for w in low):
            return "deletes a ZooKeeper subtree (deleteall/rmr) with every node under it"
    if name.removesuffix(".sh") == "kafka-topics" and "--delete" in args:
        return "kafka-topics --delete deletes a topic and every message in it"
    if name.removesuffix(".sh") == "kafka-delete-records":
        return "kafka-delete-records deletes a topic's messages up to an offset"
    if name == "rabbitmqadmin" and (
        low[:2] in (["delete", "queue"], ["delete", "vhost"], ["purge", "queue"])
    ):
        return f"rabbitmqadmin {low[0]} {low[1]} deletes the messages it holds"
    if name == "rabbitmqctl" and any(w in ("purge_queue", "delete_queue") for w in low[:2]):
        return f"rabbitmqctl {next(w for w in low[:2] if w in ('purge_queue', 'delete_queue'))} deletes a queue's messages"
    if name == "nats":
        if low[:1] in (["stream"], ["str"], ["s"]) and low[1:2] and low[1] in ("rm", "del", "delete", "purge"):
            return f"nats stream {low[1]} deletes a stream's messages"
        if low[:1] in (["kv"], ["object"], ["obj"]) and low[1:2] and low[1] in ("rm", "del", "delete") and len(ops) <= 3:
            # ``nats kv del BUCKET`` (no key) deletes the bucket; ``nats kv del BUCKET KEY`` one key
            return f"nats {low[0]} {low[1]} deletes a whole bucket"
    return ""


@handles("zookeeper-shell", "zookeeper-shell.sh", "zkCli.sh", "zkCli", "zk-shell", "kafka-topics", "kafka-topics.sh",
         "kafka-delete-records", "kafka-delete-records.sh", "rabbitmqadmin", "nats")
def _h_store(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Non-SQL stores' own drops: ZooKeeper ``deleteall``/``rmr``, ``kafka-topics --delete``,
    ``rabbitmqadmin delete|purge queue``, ``nats stream rm|purge``, ``nats kv del BUCKET``."""
    why = _store_drop(name, args)
    if why:
        d.add(ctx, "db_drop", cmd.text, why + ".")


@also("consul", "vault", "influx", "rabbitmqctl")
def _h_store_more(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """The same for tools another family owns (their daemon stop verbs, influx's SQL): ``consul kv delete
    -recurse``, ``vault secrets disable``, ``influx bucket delete``, ``influx delete`` with no predicate,
    ``rabbitmqctl purge_queue``."""
    why = _store_drop(name, args)
    if why:
        d.add(ctx, "db_drop", cmd.text, why + ".")


# -- data: scan-then-delete key loops


@also("redis-cli", "valkey-cli", "keydb-cli")
def _h_redis_mass(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``redis-cli --scan | xargs redis-cli del``: deleting keys listed by another command.

    must match: ``redis-cli --scan --pattern 's:*' | xargs redis-cli DEL``, ``redis-cli KEYS '*' | xargs redis-cli unlink``;
    must not: ``redis-cli del session:42``, ``redis-cli --scan | wc -l``."""
    verbs = [a.lower() for a in args if not a.startswith("-")]
    if any(v in ("del", "unlink") for v in verbs) and (any(UNKNOWN in a for a in args) or _fed_by_redis_listing(cmd)):
        d.add(ctx, "redis_flush", cmd.segment, "Deletes every Redis key another command listed.")


def _fed_by_redis_listing(cmd: Cmd) -> bool:
    for g in cmd.upstream:
        for m in g:
            if m.argv and base_name(m.argv[0]).endswith("-cli") and any(
                a in ("--scan", "keys", "KEYS", "scan", "SCAN") for a in m.argv
            ):
                return True
    return False


# The rules of this family, by what they must and must not catch (checked at load: approval.examples).
EXAMPLES: tuple[Examples, ...] = (
    Examples(
        "sql_destructive",
        match=("psql -c 'DROP TABLE users'", "mysql app -e 'TRUNCATE orders'", "sqlite3 app.db 'DELETE FROM users'",
               "echo 'DROP DATABASE x' | mysql", "psql <<< 'UPDATE users SET admin = true'"),
        no_match=("psql -c 'SELECT 1'", "psql -c \"SELECT 'DROP TABLE x'\"", "mysql -e 'SHOW DATABASES'",
                  "sqlite3 app.db 'DELETE FROM users WHERE id = 4'"),
    ),
    Examples(
        "db_drop",
        match=("dropdb production", "rails db:drop", "php artisan migrate:fresh", "python manage.py flush --noinput",
               "consul kv delete -recurse app/", "vault secrets disable kv/", "influx bucket delete -n metrics",
               "kafka-topics.sh --bootstrap-server k:9092 --delete --topic orders", "zookeeper-shell zk:2181 deleteall /app",
               "rabbitmqadmin purge queue name=jobs", "nats stream rm ORDERS -f", "appctl sql flush", "appctl db truncate"),
        no_match=("rails db:migrate", "createdb test", "python manage.py migrate", "consul kv delete app/key",
                  "consul kv get -recurse", "vault secrets list", "influx delete --bucket b --predicate '_measurement=\"x\"' "
                  "--start 2024-01-01T00:00:00Z --stop 2024-02-01T00:00:00Z", "kafka-topics --list --bootstrap-server k:9092",
                  "nats kv del cfg mykey", "rabbitmqadmin list queues", "appctl sql format q.sql", "appctl db status"),
    ),
    Examples(
        "redis_flush",
        match=("redis-cli FLUSHALL", "redis-cli -n 2 flushdb", "echo FLUSHALL | redis-cli",
               "redis-cli --scan --pattern 'user:*' | xargs redis-cli del"),
        no_match=("redis-cli PING", "redis-cli INFO", "redis-cli GET user:1", "redis-cli DEL user:1"),
    ),
    Examples(
        "mongo_drop",
        match=("mongosh --eval 'db.dropDatabase()'", "mongo app --eval 'db.users.deleteMany({})'"),
        no_match=("mongosh --eval 'db.users.find()'", "mongo app --eval 'db.users.deleteMany({age: 3})'"),
    ),
    Examples(
        "data_restore_overwrite",
        match=("pg_restore --clean -d app dump.pgdump", "mongorestore --drop dump/", "pg_restore -c -d app x.dump",
               "pg_restore --clea -d app x.dump", "pg_restore -1cd app x.dump", "pg_restore -d app x.dump --clean"),
        no_match=("pg_restore -l dump.pgdump", "pg_dump app > app.sql", "mongodump", "pg_restore -cl x.dump",
                  "pg_restore --create -d postgres x.dump"),
    ),
    Examples(
        "http_delete",
        match=("curl -X DELETE http://es:9200/logs-*", "curl -XDELETE localhost:9200/_all", "curl -X DELETE http://es:9200/logs",
               "curl -XPOST es:9200/logs/_delete_by_query -d '{\"query\":{\"match_all\":{}}}'",
               "curl -sX DELETE http://es:9200/logs-*", "curl -sSXDELETE es:9200/_all", "wget -q --meth=DELETE http://es:9200/idx"),
        no_match=("curl http://es:9200/_cat/indices", "curl -X DELETE http://api/users/42/sessions/9", "curl -X GET http://es:9200/logs",
                  "curl -sX GET http://es:9200/logs", "curl --req DELETE http://es:9200/logs"),
    ),
)
