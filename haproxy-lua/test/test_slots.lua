-- Properties of huntlb.slots.assign over bounded random histories of the
-- usable set. Usage (from the repo root): lua5.4 haproxy-lua/test/test_slots.lua
package.path = "haproxy-lua/?.lua;" .. package.path
local slots = require "huntlb.slots"

local failed, checks = 0, 0
local function check(ok, msg)
    checks = checks + 1
    if not ok then failed = failed + 1; io.stderr:write("FAIL: ", msg, "\n") end
end

local COUNT = slots.COUNT
local function counts(owner)
    local c = {}
    for i = 0, COUNT - 1 do
        local o = owner[i]
        if o then c[o] = (c[o] or 0) + 1 end
    end
    return c
end

-- After every assignment: every slot names a usable server, shares differ by
-- at most one, and a second call with the same set changes nothing.
local function check_invariants(owner, up, what)
    local set = {}
    for _, name in ipairs(up) do set[name] = true end
    local c = counts(owner)
    if #up < 2 then
        check(next(c) == nil, what .. ": slots left with fewer than 2 usable")
        return
    end
    local lo, hi = math.huge, 0
    for _, name in ipairs(up) do
        lo = math.min(lo, c[name] or 0); hi = math.max(hi, c[name] or 0)
    end
    local all_usable = true
    for i = 0, COUNT - 1 do
        if not set[owner[i]] then all_usable = false end
    end
    check(all_usable, what .. ": a slot names an unusable server")
    check(hi - lo <= 1, string.format("%s: shares %d..%d differ by more than 1", what, lo, hi))
    check(#slots.assign(owner, up, COUNT) == 0, what .. ": a repeated assignment changed slots")
end

local function names(n)
    local t = {}
    for i = 1, n do t[i] = "web" .. i end
    return t
end

-- From empty: every slot is written once.
local owner = {}
local ch = slots.assign(owner, names(12), COUNT)
check(#ch == COUNT, "first assignment writes every slot: " .. #ch)
check_invariants(owner, names(12), "12 from empty")
local c = counts(owner)
check(c.web1 == 70 and c.web12 == 70, "840 slots over 12 servers: 70 each")

-- Slots not known yet (false: what the map file held at start) are all
-- rewritten, or all deleted when there is nothing to offer.
local unknown = {}
for i = 0, COUNT - 1 do unknown[i] = false end
check(#slots.assign(unknown, names(3), COUNT) == COUNT, "unknown slots are all written")
for i = 0, COUNT - 1 do unknown[i] = false end
check(#slots.assign(unknown, { "web1" }, COUNT) == COUNT and next(counts(unknown)) == nil,
    "unknown slots are all deleted with fewer than 2 usable")

-- One server leaves: only its own slots change.
local before = counts(owner).web5
local up11 = names(12); table.remove(up11, 5)
ch = slots.assign(owner, up11, COUNT)
check(#ch == before, string.format("a leaving server moves only its %d slots (moved %d)", before, #ch))
check_invariants(owner, up11, "11 after one left")

-- It comes back: it takes its share and nothing else moves.
ch = slots.assign(owner, names(12), COUNT)
check(#ch == 70, "a joining server takes 70 slots, moved " .. #ch)
check_invariants(owner, names(12), "12 after one came back")

-- Down to one: nothing offered; back to two: all slots rewritten.
ch = slots.assign(owner, { "web3" }, COUNT)
check(#ch == COUNT, "fewer than 2 usable empties every slot")
check_invariants(owner, { "web3" }, "1 usable")
ch = slots.assign(owner, { "web3", "web7" }, COUNT)
check(#ch == COUNT and counts(owner).web3 == 420, "2 usable: 420 each")

-- Bounded random histories: add or remove one server, or swap the whole set.
math.randomseed(7)
for step = 1, 300 do
    local n = math.random(0, 30)
    local up, seen = {}, {}
    for _ = 1, n do
        local name = "s" .. math.random(1, 40)
        if not seen[name] then seen[name] = true; up[#up + 1] = name end
    end
    local prev = counts(owner)
    ch = slots.assign(owner, up, COUNT)
    check_invariants(owner, up, "random step " .. step)
    if #up >= 2 then
        -- a slot already held by a usable server moves only to fix the balance
        -- every server keeps what it held up to its smaller share
        local must_keep = 0
        for _, name in ipairs(up) do must_keep = must_keep + math.min(prev[name] or 0, COUNT // #up) end
        check(#ch <= COUNT - must_keep,
            string.format("step %d: %d slots changed, at most %d needed", step, #ch, COUNT - must_keep))
    end
end

io.write(string.format("slots: %d checks, %d failed\n", checks, failed))
os.exit(failed == 0 and 0 or 1)
