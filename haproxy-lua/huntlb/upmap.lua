-- huntlb.upmap: the front's map of usable servers, and how to bring it up to
-- date with the fewest writes.
--
-- The front picks its first candidate natively, with no per-request Lua:
--
--   http-request set-var(txn.hunt_n) nbsrv
--   http-request set-var(txn.hunt_offer) rand,mod(txn.hunt_n),map_str(FILE) if ...
--
-- `nbsrv` is HAProxy's own count of usable servers, so the map only has to
-- name them: keys "0".."n-1", the usable servers sorted by name. A pick is then
-- exactly uniform for any n (an earlier design drew from 840 fixed slots,
-- uniform only when n divides 840), and the map is small enough to rewrite on
-- 2.6, whose `core.set_map` scans the whole map for its key.
--
-- With fewer than 2 usable servers the map is empty, and the config checks
-- n >= 2 itself, at once: an offer's retry would come back to the same server.
--
-- Pure functions, no HAProxy: tested standalone on Lua 5.3 and 5.4.

local ipairs = ipairs
local pairs = pairs
local tostring = tostring
local tbl_sort = table.sort

local _M = { _VERSION = "1" }

--- The map the front wants for the usable servers `up` (a list of distinct
--- names): key tostring(i - 1) -> up[i], in the order given; empty with fewer
--- than 2.
function _M.wanted(up)
    local want = {}
    if #up >= 2 then
        for i, name in ipairs(up) do want[tostring(i - 1)] = name end
    end
    return want
end

--- What to write to bring the map `held` (key -> name, what HAProxy holds now)
--- to `want`: returns `sets`, a sorted list of {key, name} whose value is
--- missing or different, and `dels`, a sorted list of keys to delete. Keys
--- that already hold the right name are not touched.
function _M.diff(held, want)
    local sets, dels = {}, {}
    for key, name in pairs(want) do
        if held[key] ~= name then sets[#sets + 1] = { key, name } end
    end
    for key in pairs(held) do
        if want[key] == nil then dels[#dels + 1] = key end
    end
    tbl_sort(sets, function(a, b) return a[1] < b[1] end)
    tbl_sort(dels)
    return sets, dels
end

--- Parse a map file's text (what HAProxy loaded at start) into key -> value:
--- one "key value" per line, `#` comments and blank lines skipped, as HAProxy
--- reads it.
function _M.parse(text)
    local held = {}
    for line in (text or ""):gmatch("[^\n]+") do
        local key, value = line:match("^%s*([^%s#]%S*)%s+(.-)%s*$")
        if key then
            held[key] = value
        else
            key = line:match("^%s*([^%s#]%S*)%s*$")
            if key then held[key] = "" end
        end
    end
    return held
end

return _M
