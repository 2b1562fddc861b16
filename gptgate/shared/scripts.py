"""The Lua scripts: each one fleet operation, atomic on the Redis server.

A backend's permits are a sorted set of lease id → expiry (ms, Redis's clock): a lease
counts while its expiry is in the future, so a process that dies without releasing has its
permits back once they expire. Expired leases are swept by whoever acquires next.

Every script reads its ``now`` from Redis (``TIME``): leases, waiters, live marks, the
leader's lead and the budgets' refills are all judged on one clock, so a process whose own
clock runs ahead (an hour, a VM resumed with a stale clock) no longer sweeps the others' live
permits (tests/test_shared_redis_clock.py). Redis 5+ replicates a script by its effects (the
scores it wrote, not the script), so a script may read the time and then write; the fleet
already needs 5+ (ZPOPMIN). The ``now`` argument each script still takes is '' but in tests
(``FleetClient(fleet_clock=...)``), which move time by hand.

A process refused a permit is queued in the backend's *waiters* sorted set (worker id → when
it began waiting, ms); a script that frees permits pops as many waiters as it freed, oldest
first, and PUBLISHes on each one's channel (``waiters key|worker id``,
gptgate/shared/wake.py), so a released permit reaches a waiting process at once rather than at
its next poll. With nobody waiting this costs one lookup of an absent key: no PUBLISH.

A permit freed for a woken process is *reserved* for it: a short lease in the permits set
under its worker id (``worker id:~``, :data:`RESERVE_MS`), which only that process's next
acquire takes. Without it, the process that freed the permit — its next call's acquire a
round trip ahead of the woken process's — took it back every time, and a process whose calls
kept arriving kept its permits for as long as they did. A woken process that has nothing
waiting any more hands its reservation back at once; one that died holds it ``RESERVE_MS``.
"""

from __future__ import annotations

__all__ = [
    "ACQUIRE",
    "ACQUIRE_AUTO",
    "BREAKER",
    "HEALTH",
    "LEAD",
    "LIMIT",
    "PACE",
    "PAUSE",
    "PROBE",
    "PROBE_LEFT",
    "RELEASE",
    "RENEW",
    "RESIGN",
    "SAMPLE_BATCHES",
    "STATE",
    "WARM_CLAIM",
    "WARM_COUNTS",
    "WARM_DONE",
]

#: how long a permit freed for a woken process is kept for it (ms of Redis's clock):
#: a pub/sub delivery and one round trip, with room for a loaded box. A waiter that died
#: meanwhile costs the fleet one permit for this long, once.
RESERVE_MS = 250

#: sample batches a backend's list keeps while no leader drains it (the newest are kept)
SAMPLE_BATCHES = 4096

# -- waking the fleet's waiters (gptgate/shared/wake.py) -------------------------------------
# Lease ids are "worker id:n" (FleetClient.new_lease): a script names the waiting process by
# its lease id's worker part. ``wait`` queues it (first wait's time kept: oldest woken first),
# ``waited`` takes it off when it is granted, ``wake`` pops ``n``, reserves a permit for each
# and publishes to it, ``unreserve`` takes a process's reservation back (it asks now).
#: Lua: a shared key's TTL is only ever lengthened. Every process sets its own 2 × lease_s, and
#: with ``lease_s`` configured differently (config drift in a rolling deploy) a short-lease
#: process's acquire shortened the TTL under a long-lease process's permits: Redis dropped
#: them with its calls in flight, and the fleet admitted its limit again on top
#: (tests/test_shared_lease_drift.py).
_KEEP = """
local function keep(key, ttl)
  if redis.call('PTTL', key) < tonumber(ttl) then redis.call('PEXPIRE', key, ttl) end
end
"""

#: Lua: the fleet's clock in ms — Redis's (TIME), unless ``given`` is a time (a test's
#: ``fleet_clock``; '' otherwise) or already one (a number a script resolved before).
_CLOCK = """
local function clock(given)
  if given ~= '' then return tonumber(given) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"""

_WAKE = _CLOCK + _KEEP + """
local function worker_of(lease_id)
  return string.match(lease_id, '^(.*):') or lease_id
end
local function wait(waiters, lease_id, now, ttl)
  redis.call('ZADD', waiters, 'NX', now, worker_of(lease_id))
  keep(waiters, ttl)
end
local function waited(waiters, lease_id)
  redis.call('ZREM', waiters, worker_of(lease_id))
end
local function unreserve(permits, lease_id)
  return redis.call('ZREM', permits, worker_of(lease_id) .. ':~')
end
local function wake(waiters, n, permits, now)
  if n <= 0 then return end
  local woken = redis.call('ZPOPMIN', waiters, n)
  if #woken > 0 then now = clock(now) end
  for i = 1, #woken, 2 do
    redis.call('ZADD', permits, now + @RESERVE_MS@, woken[i] .. ':~')
    redis.call('PUBLISH', waiters .. '|' .. woken[i], '1')
  end
end
""".replace("@RESERVE_MS@", str(RESERVE_MS))

#: Lua expression: this worker (the lease id up to its last ':') marked live on the backend's
#: workers zset (worker id → expiry ms) until the lease's expiry, and the count of workers live
#: there. A process's share of the limit during an outage is limit ÷ this count: learnt on every
#: acquire, it is as fresh as the last call, not the last renewal (seconds old, 1 for a process
#: that started first — which then admitted the whole limit on top of the others' shares).
_LIVE = """(function()
  redis.call('ZADD', @WORKERS@, expiry, string.match(ARGV[4], '^(.*):[^:]*$'))
  keep(@WORKERS@, ARGV[5])
  return redis.call('ZCOUNT', @WORKERS@, now, '+inf')
end)()"""

#: Lua statement: a process that has been marked live on the backend (ARGV[@FLAG@] '1') and is
#: not there any more finds Redis lost the fleet's state — restarted empty, flushed, or this
#: process stalled past its lease — without any error on its side: redis-py reconnects an
#: idle connection the server closed on the spot. Its permits are then counted nowhere, so
#: nothing is granted on a count that leaves them out: the answer says "lost" (its 8th value)
#: and the process registers its permits again first (FleetClient.acquire).
_LOST = """if ARGV[@FLAG@] == '1' and not redis.call('ZSCORE', @WORKERS@,
    string.match(ARGV[4], '^(.*):[^:]*$')) then
  return {0, 0, 0, 0, 0, 0, 0, 1, now}
end
"""

#: Lua: an acquire's ``now`` (ARGV[1]) and its lease's expiry (ARGV[2]: lease ms later).
_NOW = """
local now = clock(ARGV[1])
local expiry = now + tonumber(ARGV[2])
"""

#: KEYS: permits zset, pause key, fleet limit key, waiters zset, workers zset. ARGV: now
#: ('': Redis's), lease ms, this process's limit, lease id, key ttl ms, '1' if this process
#: was marked live on the backend before (``_LOST``), then the ids of leases this process has
#: ended and not yet released (released first: the acquire carries them, so a busy process's
#: releases cost no round trip of their own and never make it wait for its own stale
#: permits). The fleet admits up to the lowest limit any process configured (the limit key,
#: see LIMIT). A refused process is queued as a waiter; permits freed here and left free
#: wake as many.
#: → {granted 0/1, leases counted after it, pause ms left (<= 0: none), the limit applied,
#: 0, processes waiting, workers live on the backend, 0 (1: lost, nothing done), now ms}
ACQUIRE = _WAKE + _NOW + _LOST.replace("@FLAG@", "6").replace("@WORKERS@", "KEYS[5]") + """
unreserve(KEYS[1], ARGV[4])
local freed = 0
for i = 7, #ARGV do
  freed = freed + redis.call('ZREM', KEYS[1], ARGV[i])
end
freed = freed + redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local held = redis.call('ZCARD', KEYS[1])
local pause = redis.call('PTTL', KEYS[2])
local cap = tonumber(ARGV[3])
local fleet = tonumber(redis.call('GET', KEYS[3]) or '0')
if fleet > 0 and fleet < cap then cap = fleet end
local granted = 0
if held < cap then
  redis.call('ZADD', KEYS[1], expiry, ARGV[4])
  keep(KEYS[1], ARGV[5])
  waited(KEYS[4], ARGV[4])
  granted, held = 1, held + 1
else
  wait(KEYS[4], ARGV[4], now, ARGV[5])
end
wake(KEYS[4], math.min(freed, cap - held), KEYS[1], now)
return {granted, held, pause, cap, 0, redis.call('ZCARD', KEYS[4]), @LIVE@, 0, now}
""".replace("@LIVE@", _LIVE.replace("@WORKERS@", "KEYS[5]"))

#: KEYS: fleet limit key. ARGV: this process's limit, key ttl ms. Keeps the lower of the two;
#: only a process whose limit is the fleet's keeps the key alive (every renewal sends it), so
#: once the last such process has gone the key lapses and the next lowest takes over — kept
#: alive by every acquire, the lowest limit ever set stayed for as long as any process called.
#: → the fleet's limit before (-1: none)
LIMIT = """
local prev = tonumber(redis.call('GET', KEYS[1]) or '-1')
local want = tonumber(ARGV[1])
if prev < 0 or want <= prev then
  redis.call('SET', KEYS[1], want, 'PX', ARGV[2])
end
return prev
"""

#: KEYS: permits zset, waiters zset [, samples list]. ARGV: a batch of samples ('' none; only
#: with the samples key), now ('': Redis's), then the ids of the leases ended; as many
#: waiters are woken (a permit reserved for each).
#: → how many were still counted
RELEASE = _WAKE + """
if KEYS[3] and ARGV[1] ~= '' then
  redis.call('RPUSH', KEYS[3], ARGV[1])
  redis.call('LTRIM', KEYS[3], -@BATCHES@, -1)
  redis.call('PEXPIRE', KEYS[3], 600000)
end
local released = 0
for i = 3, #ARGV do
  released = released + redis.call('ZREM', KEYS[1], ARGV[i])
end
wake(KEYS[2], released, KEYS[1], ARGV[2])
return released
""".replace("@BATCHES@", str(SAMPLE_BATCHES))

# ``concurrency="auto"`` fleet-wide (gptgate/shared/auto.py): one process, the leader, holds
# a lease on the backend's leader key ("expiry ms|worker id"), drains the samples every
# process pushes, runs the one LLMLimit and publishes its limit in the auto key, which
# ACQUIRE_AUTO applies as the fleet's cap.

#: KEYS: permits zset, pause key, auto (published limit) key, samples list, waiters zset,
#: workers zset.
#: ARGV: now ('': Redis's), lease ms, this process's proposal (its last known fleet limit: the
#: cap while none is published), lease id, key ttl ms, a batch of samples ('' none), '1' if
#: marked live on the backend before (``_LOST``), then the ids of leases ended and not yet
#: released (as ACQUIRE, waiters too).
#: → {granted 0/1, leases counted after it, pause ms left, the cap applied, published or 0,
#: processes waiting, workers live on the backend, 0 (1: lost, nothing done), now ms}
ACQUIRE_AUTO = _WAKE + _NOW + _LOST.replace("@FLAG@", "7").replace("@WORKERS@", "KEYS[6]") + """
unreserve(KEYS[1], ARGV[4])
local freed = 0
for i = 8, #ARGV do
  freed = freed + redis.call('ZREM', KEYS[1], ARGV[i])
end
if ARGV[6] ~= '' then
  redis.call('RPUSH', KEYS[4], ARGV[6])
  redis.call('LTRIM', KEYS[4], -@BATCHES@, -1)
  redis.call('PEXPIRE', KEYS[4], 600000)
end
freed = freed + redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local held = redis.call('ZCARD', KEYS[1])
local pause = redis.call('PTTL', KEYS[2])
local cap = tonumber(ARGV[3])
local fleet = tonumber(redis.call('GET', KEYS[3]) or '0')
if fleet > 0 then cap = fleet end
local granted = 0
if held < cap then
  redis.call('ZADD', KEYS[1], expiry, ARGV[4])
  keep(KEYS[1], ARGV[5])
  waited(KEYS[5], ARGV[4])
  granted, held = 1, held + 1
else
  wait(KEYS[5], ARGV[4], now, ARGV[5])
end
wake(KEYS[5], math.min(freed, cap - held), KEYS[1], now)
return {granted, held, pause, cap, fleet, redis.call('ZCARD', KEYS[5]), @LIVE@, 0, now}
""".replace("@BATCHES@", str(SAMPLE_BATCHES)).replace(
    "@LIVE@", _LIVE.replace("@WORKERS@", "KEYS[6]")
)

#: KEYS: leader key, samples list, auto key, state key, permits zset, waiters zset. ARGV:
#: worker id, now ('': Redis's), lease ms,
#: limit to publish (0: none), limit state to keep ('' none), key ttl ms, 1 from a process
#: not leading yet (it is handed the kept state, and its limit is published only where none
#: is: the last leader's stands until the new one has computed its own). Takes the lead when
#: nobody holds it or its holder's lease ran out; the leader renews it, publishes, and drains
#: the samples. A limit published above the leases held wakes as many waiters.
#: → {1 leading / 0 not, published limit or 0, the sample batches drained, the kept state,
#: now ms (the publish's date: calls granted before it ran under the last limit)}
LEAD = _WAKE + """
local now = clock(ARGV[2])
local held = redis.call('GET', KEYS[1])
local holder = nil
if held then
  local sep = string.find(held, '|', 1, true)
  if sep and tonumber(string.sub(held, 1, sep - 1)) > now then
    holder = string.sub(held, sep + 1)
  end
end
if holder and holder ~= ARGV[1] then
  return {0, tonumber(redis.call('GET', KEYS[3]) or '0'), {}, false, now}
end
redis.call('SET', KEYS[1], (now + tonumber(ARGV[3])) .. '|' .. ARGV[1], 'PX', ARGV[6])
if tonumber(ARGV[4]) > 0 then
  if ARGV[7] == '1' then
    redis.call('SET', KEYS[3], ARGV[4], 'PX', ARGV[6], 'NX')
  else
    redis.call('SET', KEYS[3], ARGV[4], 'PX', ARGV[6])
  end
  if redis.call('EXISTS', KEYS[6]) == 1 then
    local published = tonumber(redis.call('GET', KEYS[3]) or '0')
    wake(KEYS[6], published - redis.call('ZCOUNT', KEYS[5], '(' .. now, '+inf'), KEYS[5],
         now)
  end
end
if ARGV[5] ~= '' then
  redis.call('SET', KEYS[4], ARGV[5], 'PX', ARGV[6])
end
local batches = redis.call('LRANGE', KEYS[2], 0, -1)
redis.call('DEL', KEYS[2])
local state = false
if ARGV[7] == '1' then state = redis.call('GET', KEYS[4]) end
return {1, tonumber(redis.call('GET', KEYS[3]) or '0'), batches, state, now}
"""

#: KEYS: leader key. ARGV: worker id. A leader that stops hands the lead over at once (the
#: next process to ask takes it) instead of after its lease. → 1 if it was the leader
RESIGN = """
local held = redis.call('GET', KEYS[1])
if held then
  local sep = string.find(held, '|', 1, true)
  if sep and string.sub(held, sep + 1) == ARGV[1] then
    redis.call('DEL', KEYS[1])
    return 1
  end
end
return 0
"""

#: KEYS: workers zset, n backends' workers zsets, their n names zsets (gptgate/shared/
#: names.py), then their n permits zsets. ARGV: now ('': Redis's), lease ms, worker id, key
#: ttl ms, n, '1' if this worker was marked live before, n ``base_url|model`` (one per
#: backend, registered under its name), then pairs (index into KEYS, lease id).
#: Re-adds a lease Redis lost (a restart empties it: the call is still in flight, so it must
#: count). → {live workers, 1 if this worker was marked live before and is not any more:
#: Redis lost the fleet's state (``_LOST``), Redis's clock: seconds, microseconds (TIME),
#: per backend the other ``base_url|model`` registered under its name, per backend the
#: leases counted now (unexpired: what an acquire would count; an idle process's
#: ``fleet_in_flight`` was its last acquire's for good)}
RENEW = _CLOCK + _KEEP + """
local now = clock(ARGV[1])
local expiry = now + tonumber(ARGV[2])
local lost = 0
if ARGV[6] == '1' and not redis.call('ZSCORE', KEYS[1], ARGV[3]) then lost = 1 end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], expiry, ARGV[3])
keep(KEYS[1], ARGV[4])
for k = 2, tonumber(ARGV[5]) + 1 do
  redis.call('ZREMRANGEBYSCORE', KEYS[k], '-inf', now)
  redis.call('ZADD', KEYS[k], expiry, ARGV[3])
  keep(KEYS[k], ARGV[4])
end
local n = tonumber(ARGV[5])
local others = {}
for k = 1, n do
  local key, mine = KEYS[n + 1 + k], ARGV[6 + k]
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  redis.call('ZADD', key, expiry, mine)
  keep(key, ARGV[4])
  local found = {}
  for _, member in ipairs(redis.call('ZRANGE', key, 0, -1)) do
    if member ~= mine then found[#found + 1] = member end
  end
  others[k] = found
end
for i = 7 + n, #ARGV, 2 do
  local key = KEYS[tonumber(ARGV[i])]
  redis.call('ZADD', key, expiry, ARGV[i + 1])
  keep(key, ARGV[4])
end
local counted = {}
for k = 1, n do
  counted[k] = redis.call('ZCOUNT', KEYS[2 * n + 1 + k], '(' .. now, '+inf')
end
local time = redis.call('TIME')
return {redis.call('ZCARD', KEYS[1]), lost, time[1], time[2], others, counted}
"""

#: KEYS: pause key, fleet limit key, waiters zset, workers zset. ARGV: now ('': Redis's).
#: What an acquire
#: tells besides its grant, for a process whose calls reuse the permits its last calls ended
#: (sent with its releases, no round trip of its own). → {pause ms left (<= 0: none), the
#: fleet's limit or 0, processes waiting, workers live on the backend}
STATE = _CLOCK + """
return {redis.call('PTTL', KEYS[1]), tonumber(redis.call('GET', KEYS[2]) or '0'),
        redis.call('ZCARD', KEYS[3]), redis.call('ZCOUNT', KEYS[4], clock(ARGV[1]), '+inf')}
"""

# A claim with a lease, single-flight across the fleet (a half-open probe, a warm-up): the
# ms another holder's claim has left, or nil once ``who`` holds it for ``ttl`` ms.
_CLAIM = """
local function claim(key, who, ttl)
  local holder = redis.call('GET', key)
  if holder and holder ~= who then
    return math.max(1, redis.call('PTTL', key))
  end
  redis.call('SET', key, who, 'PX', ttl)
  return nil
end
"""

#: KEYS: pause key. ARGV: pause ms. Lengthens a pause, never shortens it. → pause ms left
PAUSE = """
local left = redis.call('PTTL', KEYS[1])
local want = tonumber(ARGV[1])
if left < want then
  redis.call('SET', KEYS[1], '1', 'PX', want)
  return want
end
return left
"""

# A backend's fleet circuit is a string key: "open" with a TTL of the cool-down, or "closed"
# (a probe succeeded) with a TTL of its own; gone = the cool-down passed and nobody has probed
# yet (half-open). The probe key holds the one process allowed to probe, for a probe's time.

#: KEYS: circuit key, probe key. ARGV: "open" or "closed", ms (the cool-down, or how long
#: "closed" is remembered). An open circuit is only lengthened by another open, never
#: shortened. Ends any probe. → 1
BREAKER = """
redis.call('DEL', KEYS[2])
if ARGV[1] == 'open' then
  local left = redis.call('PTTL', KEYS[1])
  if redis.call('GET', KEYS[1]) == 'open' and left >= tonumber(ARGV[2]) then return 1 end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

#: KEYS: a backend's circuit key (one script per backend, pipelined: a key per hash slot).
#: → {0 none / 1 open / 2 closed, ms left}
HEALTH = """
local value = redis.call('GET', KEYS[1])
local state = 0
if value == 'open' then state = 1 elseif value == 'closed' then state = 2 end
return {state, redis.call('PTTL', KEYS[1])}
"""

#: KEYS: circuit key, probe key. ARGV: this prober's id, probe ms. A half-open backend is
#: probed by one process of the fleet at a time. → 0: probe it; else the ms to stay open
#: (the circuit is open, or another process is probing)
PROBE = _CLAIM + """
if redis.call('GET', KEYS[1]) == 'open' then
  return math.max(1, redis.call('PTTL', KEYS[1]))
end
return claim(KEYS[2], ARGV[1], ARGV[2]) or 0
"""

#: KEYS: probe key. ARGV: this prober's id. Its probe ended without a verdict (cancelled, a
#: 429, a stream left): the lease goes back, so another process may probe now rather than
#: after the probe's whole time. Another holder's lease is left alone. → 1 if handed back
PROBE_LEFT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# -- fleet-wide RPM/TPM pacing (gptgate/shared/pacing.py) ------------------------------------
# A backend's rate budgets are one hash: per budget ("r" requests, "k" tokens) its capacity
# (margin x the reported per-minute limit), level, last update (ms) and how much the fleet has
# taken in all ("s": a sequence, so a report can say what its server had counted).

#: KEYS: pace hash, permits zset (this process's releases of the backend ride along), its
#: waiters zset (as many are woken as were released).
#: ARGV: 1 now ('': Redis's), 2 tokens to take (-1: take nothing), 3 margin, 4 ms of one
#: minute of the gateway's clock, 5 key ttl ms, 6 tokens given back (reconciled calls), 7-13 a
#: report or -1s: how long ago it was read (ms: it is dated on Redis's clock, not on the
#: process's, which may be off), the requests and tokens the fleet had taken at its call's take (-1:
#: unknown), limit and remaining requests, limit and remaining tokens; 14 the longest delay
#: the caller can wait (ms, -1: any; a longer one takes nothing: a call that will not be sent
#: must not spend the budget); 15 the lease this take rides with ("" none: a take sent on its
#: own) — pipelined after that lease's ACQUIRE, the take runs only if the lease was granted;
#: 16.. released leases.
#: A report with its call's sequence sets the level exactly (the server counted up to that
#: take, not what the fleet took after it), one without it may only lower the level. The
#: level may go negative: later takers queue behind (GCRA-style) instead of racing.
#: → {delay ms, requests taken up to this take, tokens taken up to it (-1s: none taken, the
#: delay is too long; -2s: none taken, the lease was not granted), 1 if a budget is known}
PACE = _WAKE + """
local now = clock(ARGV[1])
local released = 0
for i = 16, #ARGV do
  released = released + redis.call('ZREM', KEYS[2], ARGV[i])
end
wake(KEYS[3], released, KEYS[2], now)
local want = tonumber(ARGV[2])
local margin = tonumber(ARGV[3])
local minute = tonumber(ARGV[4])
local raw = redis.call('HGETALL', KEYS[1])
local s = {}
for i = 1, #raw, 2 do s[raw[i]] = tonumber(raw[i + 1]) end
local function advance(p)
  local cap = s[p .. 'c']
  if cap == nil or now <= s[p .. 't'] then return end
  s[p .. 'l'] = math.min(cap, s[p .. 'l'] + (now - s[p .. 't']) * cap / minute)
  s[p .. 't'] = now
end
local function report(p, at, seq, limit, remaining)
  if limit > 0 then
    local cap = margin * limit
    if s[p .. 'c'] == nil then
      s[p .. 'l'] = cap
      s[p .. 't'] = math.min(at, now)
      s[p .. 's'] = 0
    end
    s[p .. 'c'] = cap
  end
  local cap = s[p .. 'c']
  if cap == nil or remaining < 0 then return end
  local level = remaining - (cap / margin - cap)
  if seq >= 0 then
    s[p .. 'l'] = level - math.max(0, s[p .. 's'] - seq)
    s[p .. 't'] = math.min(at, now)
    advance(p)
  else
    advance(p)
    s[p .. 'l'] = math.min(s[p .. 'l'], level)
  end
end
if tonumber(ARGV[7]) >= 0 then
  local at = now - tonumber(ARGV[7])
  report('r', at, tonumber(ARGV[8]), tonumber(ARGV[10]), tonumber(ARGV[11]))
  report('k', at, tonumber(ARGV[9]), tonumber(ARGV[12]), tonumber(ARGV[13]))
end
local known = 0
if s['rc'] ~= nil or s['kc'] ~= nil then known = 1 end
local back = tonumber(ARGV[6])
if back ~= 0 and s['kc'] ~= nil then
  advance('k')
  s['kl'] = math.min(s['kc'], s['kl'] + back)
end
local delay = 0
local took = 1
if ARGV[15] ~= '' and not redis.call('ZSCORE', KEYS[2], ARGV[15]) then
  took = -1
end
if took == 1 and want >= 0 and known == 1 then
  local function wait(p, amount)
    local cap = s[p .. 'c']
    if cap == nil then return 0 end
    advance(p)
    amount = math.min(amount, cap)
    if s[p .. 'l'] >= amount then return 0 end
    return (amount - s[p .. 'l']) * minute / cap
  end
  delay = math.max(wait('r', 1), wait('k', want))
  local most = tonumber(ARGV[14])
  if most >= 0 and delay > most then
    took = 0
  else
    if s['rc'] ~= nil then
      s['rl'] = s['rl'] - 1
      s['rs'] = s['rs'] + 1
    end
    if s['kc'] ~= nil then
      s['kl'] = s['kl'] - want
      s['ks'] = s['ks'] + want
    end
  end
end
if known == 1 then
  local out = {}
  for field, value in pairs(s) do
    out[#out + 1] = field
    out[#out + 1] = string.format('%.17g', value)
  end
  redis.call('HSET', KEYS[1], unpack(out))
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
end
if took == -1 then return {0, -2, -2, known} end
if took == 0 then return {math.ceil(delay), -1, -1, known} end
return {math.ceil(delay), s['rs'] or 0, s['ks'] or 0, known}
"""

# -- fleet-wide cache warm-up single-flight (gptgate/shared/warmup.py) -----------------------
# Per backend and prefix: a "warm" key (the prefix is cached there; its TTL is how long the
# fleet trusts that) and a "claim" key (the process sending the warm-up, for a lease).

#: KEYS: warm key, claim key. ARGV: claimant id, lease ms, warm ttl ms.
#: → 0: warm already (its ttl renewed); -1: claimed, this process warms it; else the ms left
#: on another process's claim (wait: it is warm by then, or the claim lapsed)
WARM_CLAIM = _CLAIM + """
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 0
end
return claim(KEYS[2], ARGV[1], ARGV[2]) or -1
"""

#: KEYS: warm key, claim key. ARGV: claimant id, "warm" (the warm-up was prefilled) or
#: "failed", warm ttl ms. Ends this claimant's claim; a failed one frees the prefix for the
#: next claimant at once. → 1
WARM_DONE = """
if ARGV[2] == 'warm' then
  redis.call('SET', KEYS[1], '1', 'PX', ARGV[3])
end
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('DEL', KEYS[2])
end
return 1
"""

#: KEYS: the backend's hit counts, then per prefix its hit counts and its members (hashes of
#: "c" cached and "n" cacheable input tokens, expiring on their own when no process uses the
#: prefix any more; a zset of the processes with calls on it, each until its expiry).
#: ARGV: ttl ms, this process's id, now ('': Redis's), member ms, then a pair (cached,
#: cacheable) per prefix: what this process observed since it last sent them (0s for a
#: prefix it only calls). → {cached, cacheable} of the backend, then {cached, cacheable,
#: processes} of each prefix: the fleet's
WARM_COUNTS = _CLOCK + """
local out = {}
local function add(key, cached, cacheable)
  out[#out + 1] = redis.call('HINCRBY', key, 'c', cached)
  out[#out + 1] = redis.call('HINCRBY', key, 'n', cacheable)
  redis.call('PEXPIRE', key, ARGV[1])
end
local groups = (#KEYS - 1) / 2
local cached, cacheable = 0, 0
for g = 1, groups do
  cached = cached + tonumber(ARGV[3 + 2 * g])
  cacheable = cacheable + tonumber(ARGV[4 + 2 * g])
end
add(KEYS[1], cached, cacheable)
local now = clock(ARGV[3])
for g = 1, groups do
  add(KEYS[2 * g], tonumber(ARGV[3 + 2 * g]), tonumber(ARGV[4 + 2 * g]))
  local members = KEYS[2 * g + 1]
  redis.call('ZREMRANGEBYSCORE', members, '-inf', now)
  redis.call('ZADD', members, now + tonumber(ARGV[4]), ARGV[2])
  redis.call('PEXPIRE', members, ARGV[4])
  out[#out + 1] = redis.call('ZCARD', members)
end
return out
"""
