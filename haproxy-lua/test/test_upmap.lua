-- Properties of huntlb.upmap over bounded random histories of the usable set.
-- Usage (from the repo root): lua5.4 haproxy-lua/test/test_upmap.lua
package.path = "haproxy-lua/?.lua;" .. package.path
local upmap = require "huntlb.upmap"

local tally = dofile("haproxy-lua/test/tally.lua")
local check = tally.check

local function size(t)
    local n = 0
    for _ in pairs(t) do n = n + 1 end
    return n
end

local function names(n)
    local t = {}
    for i = 1, n do t[i] = "web" .. i end
    return t
end

-- Apply a diff the way the front does, checking it touches only what differs.
local function apply(held, want, what)
    local sets, dels = upmap.diff(held, want)
    for _, kv in ipairs(sets) do
        check(held[kv[1]] ~= kv[2], what .. ": rewrote key " .. kv[1] .. " that already held " .. kv[2])
        held[kv[1]] = kv[2]
    end
    for _, k in ipairs(dels) do
        check(held[k] ~= nil and want[k] == nil, what .. ": deleted key " .. k .. " it should not")
        held[k] = nil
    end
    return #sets + #dels
end

-- The map names every usable server once, under keys 0..n-1 (what
-- rand,mod(nbsrv) draws), and nothing else; empty with fewer than 2.
local function check_map(held, up, what)
    if #up < 2 then
        check(next(held) == nil, what .. ": keys left with fewer than 2 usable")
        return
    end
    check(size(held) == #up, string.format("%s: %d keys for %d usable", what, size(held), #up))
    local seen = {}
    for i = 0, #up - 1 do
        local name = held[tostring(i)]
        check(name ~= nil, what .. ": key " .. i .. " missing")
        if name then
            check(not seen[name], what .. ": " .. name .. " named twice")
            seen[name] = true
        end
    end
    for _, name in ipairs(up) do check(seen[name], what .. ": usable " .. name .. " not in the map") end
    local sets, dels = upmap.diff(held, upmap.wanted(up))
    check(#sets + #dels == 0, what .. ": a repeated update writes again")
end

-- From an empty map: n writes.
local held = {}
check(apply(held, upmap.wanted(names(3)), "start") == 3, "3 servers from empty: 3 writes")
check_map(held, names(3), "start")

-- The last server leaves: one delete, nothing else moves.
check(apply(held, upmap.wanted({ "web1", "web2" }), "web3 leaves") == 1, "last server leaves: 1 write")
check(held["0"] == "web1" and held["1"] == "web2", "web1, web2 keep their keys")

-- Down to one: nothing offered; back to three: all written.
check(apply(held, upmap.wanted({ "web2" }), "one left") == 2, "one left: both keys deleted")
check_map(held, { "web2" }, "one left")
check(apply(held, upmap.wanted(names(3)), "all back") == 3, "all back: 3 writes")

-- A map file left by an older version (840 slots) is cleaned at the first refresh.
local stale = {}
for i = 0, 839 do stale[tostring(i)] = "web" .. (i % 5 + 1) end
apply(stale, upmap.wanted(names(3)), "stale file")
check_map(stale, names(3), "stale file")

-- parse: what HAProxy reads from a map file.
local p = upmap.parse("# comment\n\n0 web1\n  1   web2  \n2\tweb3\n#3 web4\n")
check(p["0"] == "web1" and p["1"] == "web2" and p["2"] == "web3" and size(p) == 3, "parse: keys, values, comments")
check(next(upmap.parse("")) == nil and next(upmap.parse(nil)) == nil, "parse: empty")

-- 300 random steps over 12 servers: the map is right after each, and a step
-- writes at most one key per usable server plus one delete per leaver.
math.randomseed(42)
local all = names(12)
held = { ["0"] = "junk", ["17"] = "web1" }
local prev = 0
for step = 1, 300 do
    local up = {}
    for _, name in ipairs(all) do
        if math.random() < 0.7 then up[#up + 1] = name end
    end
    local writes = apply(held, upmap.wanted(up), "step " .. step)
    check_map(held, up, "step " .. step)
    local bound = (#up >= 2 and #up or 0) + math.max(prev, 2)
    check(writes <= bound, string.format("step %d: %d writes, at most %d expected", step, writes, bound))
    prev = #up >= 2 and #up or 0
end

tally.done("upmap")
