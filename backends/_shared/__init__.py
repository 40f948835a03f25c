"""What every backend gets once, instead of a copy each: written here, used by all.

* ``streams``  the two shapes of ``Process.stdout``/``stderr`` (``ByteStream``: pull; ``PushStream``:
  pull and push) and ``ByteQueue``, the bounded stream a backend feeds from an SDK or a channel.
* ``identity`` the per-daemon instance id (``Backend.instance_id``): one file, one length.
* ``retry``    ``retrying``: one definition of which failed calls may be repeated.
* ``registry`` ``SessionRegistry``: the sessions this daemon started, on its own disk, so the next
  daemon ends what a crashed one left running.
* ``kill``     the reaper and the in-sandbox tree kill (one walk, repeated until nothing new), and
  ``CLEANUP_SCRIPT`` for registries kept inside a sandbox.
* ``files``    ``atomic_write``: small state files replaced whole, safe with concurrent writers.
* ``background`` ``detach``: work started on the side, held until it ends, its failure logged.

Nothing here imports a backend, an SDK, gRPC or the core.
"""
