"""The Lua scripts behind the shared queue (``redis_queue.py``): every decision that hands out
a slot runs inside one of them, so Redis executes it atomically. ``LIB``'s ``dispatch`` is the
FIFO rule of the in-memory pool (``worker_pool.py``'s ``_dispatch_next`` with
``WorkerRegistry.pick``): walk the queue in order, give each entry the least loaded, least
over-qualified, oldest free worker that meets its requirements, skip an entry only when none
can. ``tests/e2e/test_queue_cases.py`` holds the two to one behaviour.

Keys: see ``redis_queue.py``.
"""

from __future__ import annotations

LIB = r"""
local p = KEYS[1]
local function split(s)
  local t = {}
  for x in string.gmatch(s or '', '[^,]+') do t[#t + 1] = x end
  return t
end
local function can_serve(caps, req)
  if req == nil or req == '' then return true end
  local have = {}
  for _, c in ipairs(split(caps)) do have[c] = true end
  for _, r in ipairs(split(req)) do if not have[r] then return false end end
  return true
end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function release(ticket, only_gateway)
  local l = redis.call('HMGET', p .. ':lease:' .. ticket, 'worker', 'gateway', 'resume')
  if not l[1] then return 0 end
  -- a lease another gateway adopted (a resumed session, issue 72) is not its old gateway's to free
  if only_gateway and only_gateway ~= '' and l[2] ~= only_gateway then return 0 end
  if l[3] then  -- its resume token opens nothing any more, on any gateway
    redis.call('DEL', p .. ':resume:' .. l[3])
    redis.call('SET', p .. ':resume_gone:' .. l[3], '1', 'PX', 3600000)
    redis.call('ZREM', p .. ':held', ticket)
  end
  local key = p .. ':worker:' .. l[1]
  if redis.call('EXISTS', key) == 1 and tonumber(redis.call('HGET', key, 'busy') or '0') > 0 then
    redis.call('HINCRBY', key, 'busy', -1)
  end
  redis.call('DEL', p .. ':lease:' .. ticket)
  redis.call('SREM', p .. ':gw:' .. l[2] .. ':leases', ticket)
  redis.call('SREM', p .. ':wl:' .. l[1], ticket)
  return 1
end
local function leave_queue(ticket)
  local g = redis.call('HGET', p .. ':entry:' .. ticket, 'gateway')
  if redis.call('ZREM', p .. ':queue', ticket) == 0 then return 0 end
  redis.call('DEL', p .. ':entry:' .. ticket)
  if g then redis.call('SREM', p .. ':gw:' .. g .. ':queued', ticket) end
  return 1
end
local function dispatch()
  local assigned = {}
  local info, free = {}, 0
  local now = now_ms()
  for _, id in ipairs(redis.call('SMEMBERS', p .. ':workers')) do
    local w = redis.call('HMGET', p .. ':worker:' .. id, 'slots', 'busy', 'caps', 'health', 'order', 'hold_until')
    local slots, busy = tonumber(w[1]) or 0, tonumber(w[2]) or 0
    -- hold_until: just restored after Redis lost its data; every gateway re-asserts its leases first
    if w[4] == 'healthy' and busy < slots and (tonumber(w[6]) or 0) <= now then
      free = free + slots - busy
      info[#info + 1] = {id = id, slots = slots, busy = busy, caps = w[3] or '', ncaps = #split(w[3]),
                         order = tonumber(w[5]) or 0}
    end
  end
  if free == 0 then return assigned end
  -- The queue in chunks of 64: most dispatches need only its head. Assigned entries leave the
  -- ZSET, so the next chunk starts after the entries kept so far.
  local kept, idx = 0, 1
  local queue = redis.call('ZRANGE', p .. ':queue', 0, 63)
  while free > 0 and queue[idx] do
    local t = queue[idx]
    local e = redis.call('HMGET', p .. ':entry:' .. t, 'gateway', 'req', 'at')
    local best = nil
    for _, w in ipairs(info) do
      if w.busy < w.slots and can_serve(w.caps, e[2]) then
        -- least loaded, then least over-qualified (rarer capabilities stay free), then oldest
        local load, bload = w.busy / w.slots, best and best.busy / best.slots
        if best == nil or load < bload or (load == bload and (w.ncaps < best.ncaps or
            (w.ncaps == best.ncaps and w.order < best.order))) then
          best = w
        end
      end
    end
    if best then
      best.busy = best.busy + 1
      free = free - 1
      redis.call('HINCRBY', p .. ':worker:' .. best.id, 'busy', 1)
      leave_queue(t)
      redis.call('HSET', p .. ':lease:' .. t, 'worker', best.id, 'gateway', e[1], 'started', now,
                 'queued_ms', now - (tonumber(e[3]) or now))
      redis.call('SADD', p .. ':gw:' .. e[1] .. ':leases', t)
      redis.call('SADD', p .. ':wl:' .. best.id, t)
      redis.call('PUBLISH', p .. ':events', 'assigned ' .. e[1] .. ' ' .. t .. ' ' .. best.id)
      assigned[#assigned + 1] = t
    else
      kept = kept + 1
    end
    idx = idx + 1
    if idx > #queue and #queue == 64 then
      queue = redis.call('ZRANGE', p .. ':queue', kept, kept + 63)
      idx = 1
    end
  end
  if #assigned > 0 then redis.call('PUBLISH', p .. ':events', 'queue') end
  return assigned
end
"""

# ARGV: ticket, gateway, requirements, capacity. -> {"full", waiting} | {"dup"} | {"lease", worker} | {"queued", place, length}
ENQUEUE = LIB + r"""
local ticket, gw, req, capacity = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
if redis.call('EXISTS', p .. ':entry:' .. ticket) == 1 or redis.call('EXISTS', p .. ':lease:' .. ticket) == 1 then
  return {'dup'}
end
local place = redis.call('INCR', p .. ':seq')
redis.call('ZADD', p .. ':queue', place, ticket)
redis.call('HSET', p .. ':entry:' .. ticket, 'gateway', gw, 'req', req, 'at', now_ms())
redis.call('SADD', p .. ':gw:' .. gw .. ':queued', ticket)
dispatch()
local w = redis.call('HGET', p .. ':lease:' .. ticket, 'worker')
if w then return {'lease', w} end
-- Full only for one that must wait: a free worker no earlier entry can use serves it at once.
local waiting = redis.call('ZCARD', p .. ':queue') - 1
if waiting >= capacity then
  leave_queue(ticket)
  return {'full', tostring(waiting)}
end
redis.call('PUBLISH', p .. ':events', 'queue')
return {'queued', tostring(redis.call('ZRANK', p .. ':queue', ticket) + 1), tostring(redis.call('ZCARD', p .. ':queue'))}
"""

# ARGV: ticket[, gateway]. Leaves the queue, or gives the lease back (with a gateway: only while
# the lease is that gateway's). -> 'left' | 'released' | 'none'
LEAVE = LIB + r"""
local ticket = ARGV[1]
local what = 'none'
if leave_queue(ticket) == 1 then
  what = 'left'
  redis.call('PUBLISH', p .. ':events', 'queue')
elseif release(ticket, ARGV[2]) == 1 then
  what = 'released'
end
dispatch()
return what
"""

# ARGV: id, url, slots, caps, health. Adds or updates a worker (keeps its busy count).
UPSERT_WORKER = LIB + r"""
local id = ARGV[1]
local key = p .. ':worker:' .. id
if redis.call('SADD', p .. ':workers', id) == 1 then
  redis.call('HSET', key, 'busy', 0, 'order', redis.call('INCR', p .. ':worker_seq'))
end
redis.call('HSET', key, 'url', ARGV[2], 'slots', ARGV[3], 'caps', ARGV[4], 'health', ARGV[5])
dispatch()
return 1
"""

# ARGV: id, url, slots, caps. Registers a worker (health unknown until the prober says).
# -> {'added', id} | {'exists', id} (this url is registered already) | {'taken'} (id has another url)
ADD_WORKER = LIB + r"""
local id, url = ARGV[1], ARGV[2]
for _, other in ipairs(redis.call('SMEMBERS', p .. ':workers')) do
  if redis.call('HGET', p .. ':worker:' .. other, 'url') == url then return {'exists', other} end
end
if id == '' then
  repeat id = 'w' .. (redis.call('INCR', p .. ':worker_ids') - 1) until redis.call('SISMEMBER', p .. ':workers', id) == 0
elseif redis.call('SISMEMBER', p .. ':workers', id) == 1 then
  return {'taken'}
end
redis.call('SADD', p .. ':workers', id)
redis.call('HSET', p .. ':worker:' .. id, 'url', url, 'slots', ARGV[3], 'caps', ARGV[4], 'health', 'unknown',
           'busy', 0, 'failures', 0, 'order', redis.call('INCR', p .. ':worker_seq'))
redis.call('PUBLISH', p .. ':events', 'workers')
return {'added', id}
"""

# ARGV: id. Removes a worker; its leases stay until released (they free nothing then).
REMOVE_WORKER = LIB + r"""
redis.call('SREM', p .. ':workers', ARGV[1])
redis.call('DEL', p .. ':worker:' .. ARGV[1], p .. ':wl:' .. ARGV[1])
redis.call('PUBLISH', p .. ':events', 'workers')
return 1
"""

# The prober's view of one worker. ARGV: id, health, error, probe json, slots, caps, failures seen.
# A failure reported since (by any gateway) wins: -> {'failed', failures, error}; else {'ok'} | {'gone'}.
# Operator states (disabled, dead) are never overwritten here.
PROBE = LIB + r"""
local key = p .. ':worker:' .. ARGV[1]
if redis.call('EXISTS', key) == 0 then return {'gone'} end
local w = redis.call('HMGET', key, 'failures', 'error', 'health', 'slots', 'caps')
if (tonumber(w[1]) or 0) > tonumber(ARGV[7]) then return {'failed', w[1], w[2] or ''} end
local changed = w[4] ~= ARGV[5] or w[5] ~= ARGV[6]
redis.call('HSET', key, 'error', ARGV[3], 'probe', ARGV[4], 'slots', ARGV[5], 'caps', ARGV[6])
if w[3] ~= 'disabled' and w[3] ~= 'dead' and w[3] ~= ARGV[2] then
  redis.call('HSET', key, 'health', ARGV[2])
  changed = true
end
if changed then redis.call('PUBLISH', p .. ':events', 'workers') end
dispatch()  -- also ends a restore's hold, and is the safety net for any event missed
return {'ok'}
"""

# A session saw the worker fail (any gateway). ARGV: id, reason.
FAILURE = r"""
local key = KEYS[1] .. ':worker:' .. ARGV[1]
if redis.call('EXISTS', key) == 0 then return 0 end
redis.call('HINCRBY', key, 'failures', 1)
redis.call('HSET', key, 'error', ARGV[2])
local h = redis.call('HGET', key, 'health')
if h ~= 'disabled' and h ~= 'dead' then redis.call('HSET', key, 'health', 'unhealthy') end
redis.call('PUBLISH', KEYS[1] .. ':events', 'workers')
return 1
"""

# Operator state. ARGV: id, 'disabled' | 'dead' | 'enabled' (back to 'unknown' until the prober says).
OPERATOR = LIB + r"""
local key = p .. ':worker:' .. ARGV[1]
if redis.call('EXISTS', key) == 0 then return 0 end
local h = redis.call('HGET', key, 'health')
if ARGV[2] == 'enabled' then
  if h == 'disabled' or h == 'dead' then redis.call('HSET', key, 'health', 'unknown') end
else
  redis.call('HSET', key, 'health', ARGV[2])
end
redis.call('PUBLISH', p .. ':events', 'workers')
dispatch()
return 1
"""

# After Redis lost its data: this gateway's workers and running leases come back. ARGV: gateway,
# hold_ms, nworkers, then id url slots caps health per worker, then ticket worker started per lease.
# Restored workers take no new session for hold_ms, so every gateway can re-assert its leases first.
RESTORE = LIB + r"""
local gw, hold, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()
local i = 4
for _ = 1, n do
  local id = ARGV[i]
  if redis.call('SADD', p .. ':workers', id) == 1 then
    redis.call('HSET', p .. ':worker:' .. id, 'url', ARGV[i + 1], 'slots', ARGV[i + 2], 'caps', ARGV[i + 3],
               'health', ARGV[i + 4], 'busy', 0, 'failures', 0, 'hold_until', now + hold,
               'order', redis.call('INCR', p .. ':worker_seq'))
  end
  i = i + 5
end
local restored = 0
while i <= #ARGV do
  local t, id = ARGV[i], ARGV[i + 1]
  if redis.call('EXISTS', p .. ':lease:' .. t) == 0 and redis.call('EXISTS', p .. ':moved:' .. t) == 0 then
    redis.call('HSET', p .. ':lease:' .. t, 'worker', id, 'gateway', gw, 'started', ARGV[i + 2], 'queued_ms', 0)
    redis.call('SADD', p .. ':gw:' .. gw .. ':leases', t)
    redis.call('SADD', p .. ':wl:' .. id, t)
    if redis.call('EXISTS', p .. ':worker:' .. id) == 1 then redis.call('HINCRBY', p .. ':worker:' .. id, 'busy', 1) end
    restored = restored + 1
  end
  i = i + 3
end
redis.call('PUBLISH', p .. ':events', 'workers')
return restored
"""

# One finished session into the shared average behind ETAs. ARGV: seconds, alpha, default.
RECORD = r"""
local key = KEYS[1] .. ':stats'
local avg = tonumber(redis.call('HGET', key, 'avg_session_s') or ARGV[3])
avg = avg + tonumber(ARGV[2]) * (tonumber(ARGV[1]) - avg)
redis.call('HSET', key, 'avg_session_s', tostring(avg))
return tostring(avg)
"""

# One gateway at a time probes the workers. ARGV: gateway, ttl_ms. -> 1 if it is that gateway.
PROBER = r"""
local key = KEYS[1] .. ':prober'
if redis.call('SET', key, ARGV[1], 'NX', 'PX', tonumber(ARGV[2])) then return 1 end
if redis.call('GET', key) == ARGV[1] then
  redis.call('PEXPIRE', key, tonumber(ARGV[2]))
  return 1
end
return 0
"""

# ARGV: gateway, ttl_ms. The gateway is alive for ttl_ms more.
HEARTBEAT = r"""
local p = KEYS[1]
redis.call('SADD', p .. ':gateways', ARGV[1])
redis.call('SET', p .. ':gw:' .. ARGV[1] .. ':alive', '1', 'PX', tonumber(ARGV[2]))
return 1
"""

# Gateways whose heartbeat expired lose their leases and their queue entries. -> reaped ids
REAP = LIB + r"""
local reaped = {}
for _, g in ipairs(redis.call('SMEMBERS', p .. ':gateways')) do
  if redis.call('EXISTS', p .. ':gw:' .. g .. ':alive') == 0 then
    for _, t in ipairs(redis.call('SMEMBERS', p .. ':gw:' .. g .. ':leases')) do
      local l = redis.call('HMGET', p .. ':lease:' .. t, 'resume', 'grace_ms')
      if l[1] and redis.call('EXISTS', p .. ':resume:' .. l[1]) == 1 then
        -- resumable: its worker holds the session; the slot stays taken for the grace period,
        -- for a client that comes back through another gateway
        redis.call('HSET', p .. ':lease:' .. t, 'gateway', '')
        redis.call('ZADD', p .. ':held', now_ms() + (tonumber(l[2]) or 0), t)
      else
        release(t)
      end
    end
    for _, t in ipairs(redis.call('SMEMBERS', p .. ':gw:' .. g .. ':queued')) do leave_queue(t) end
    redis.call('DEL', p .. ':gw:' .. g .. ':leases', p .. ':gw:' .. g .. ':queued')
    redis.call('HDEL', p .. ':live', g)
    redis.call('SREM', p .. ':gateways', g)
    reaped[#reaped + 1] = g
  end
end
local expired = redis.call('ZRANGEBYSCORE', p .. ':held', '-inf', now_ms())
for _, t in ipairs(expired) do  -- held for a resume nobody made
  redis.call('ZREM', p .. ':held', t)
  release(t)
end
if #reaped > 0 or #expired > 0 then
  redis.call('PUBLISH', p .. ':events', 'queue')
  dispatch()
end
return reaped
"""

# A session's lease can be resumed with its token (issue 72). ARGV: ticket, token hash, session
# id, owner ('' on an open service), grace_ms, gateway. -> 1, or 0 when the lease is gone.
RESUMABLE = r"""
local p = KEYS[1]
local t, digest = ARGV[1], ARGV[2]
if redis.call('EXISTS', p .. ':lease:' .. t) == 0 then return 0 end
redis.call('HSET', p .. ':lease:' .. t, 'resume', digest, 'grace_ms', ARGV[5])
redis.call('HSET', p .. ':resume:' .. digest, 'session', ARGV[3], 'owner', ARGV[4], 'ticket', t,
           'gateway', ARGV[6])
return 1
"""

# A gateway takes over the lease of a resumable session whose client came back to it (its old
# gateway dropped the client, or died). ARGV: token hash, owner, gateway.
# -> {'ok', session, ticket, worker, started_ms} | {'invalid'} | {'expired'}
ADOPT = r"""
local p = KEYS[1]
local digest, owner, gw = ARGV[1], ARGV[2], ARGV[3]
local r = redis.call('HMGET', p .. ':resume:' .. digest, 'session', 'owner', 'ticket')
if not r[1] then
  if redis.call('EXISTS', p .. ':resume_gone:' .. digest) == 1 then return {'expired'} end
  return {'invalid'}
end
if r[2] ~= '' and r[2] ~= owner then return {'invalid'} end
local t = r[3]
local l = redis.call('HMGET', p .. ':lease:' .. t, 'worker', 'gateway', 'started')
if not l[1] then return {'expired'} end
if l[2] ~= gw then
  redis.call('SREM', p .. ':gw:' .. l[2] .. ':leases', t)
  redis.call('SADD', p .. ':gw:' .. gw .. ':leases', t)
  redis.call('HSET', p .. ':lease:' .. t, 'gateway', gw)
  redis.call('HSET', p .. ':resume:' .. digest, 'gateway', gw)
  redis.call('ZREM', p .. ':held', t)
  -- its old gateway must not re-assert it after an outage (RESTORE), nor free it
  redis.call('SET', p .. ':moved:' .. t, gw, 'PX', 3600000)
  if l[2] ~= '' then redis.call('PUBLISH', p .. ':events', 'adopted ' .. l[2] .. ' ' .. t) end
end
return {'ok', r[1], t, l[1], l[3]}
"""

# By the name ``RedisQueue.call`` runs them under.
SCRIPTS = {
    "enqueue": ENQUEUE, "leave": LEAVE, "upsert": UPSERT_WORKER, "remove": REMOVE_WORKER, "heartbeat": HEARTBEAT,
    "reap": REAP, "add": ADD_WORKER, "probe": PROBE, "failure": FAILURE, "operator": OPERATOR, "restore": RESTORE,
    "record": RECORD, "prober": PROBER, "resumable": RESUMABLE, "adopt": ADOPT,
}
