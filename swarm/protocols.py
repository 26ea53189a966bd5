"""Request/response protocol ids (DESIGN.md: bulk bytes never ride gossip)."""

SYNC = "/swarm/sync/1"  # signed task announcements by id, for peers that joined after the gossip
BLOB = "/swarm/blob/1"  # rollout and weight blobs by content hash
SHARD = "/swarm/shard/2"  # weight pieces by manifest root + piece index (swarm/pieces.py)
CHECK = "/swarm/check/1"  # a trainer asks a checker to check one rollout commitment (its signed envelope)
PING = "/swarm/ping/1"  # is a linked peer still there? both ways, its signed heartbeat (swarm/links.py)
ALL = (SYNC, BLOB, SHARD, CHECK, PING)
CHECK_REQUEST_CAP = 16 << 10  # a commitment envelope is a few hundred bytes
PING_REQUEST_CAP = 16 << 10  # a heartbeat: 8 addresses, 32 tasks and versions, 8 peers' addresses
