-- huntlb.slots: which usable server each slot of the front's map names.
--
-- The front picks its first candidate with `rand(N),map_str(FILE)`: N
-- slots, each naming a usable server, every server owning floor(N/n) or
-- ceil(N/n) of them. When the usable set changes, only the slots that must
-- change do: a server that leaves gives up just its own slots, one that joins
-- takes about N/n. That matters on HAProxy 2.6, where `core.set_map` scans
-- the whole map for its key: rewriting all N slots costs O(N^2) (5040 slots
-- took 0.4-0.5 s of CPU per health change), a minimal update O(N^2 / n).
--
-- Pure functions, no HAProxy: tested standalone on Lua 5.3 and 5.4.

local ipairs = ipairs
local tbl_sort = table.sort

local _M = { _VERSION = "1" }

--- Slots in the front's map: 840 = lcm(1..8), divisible by 1-8, 10, 12, 14,
--- 15, 20, 21, 24, 28, 30, 35, 40, 42 and 60 servers (an exactly uniform
--- pick), and within 1.5% of uniform for any n up to 16.
_M.COUNT = 840

--- Reassign `owner` (slot 0..count-1 -> server name, nil for empty, false for
--- not known: rewritten either way) to the usable servers `up` (a list of
--- distinct names). Returns the list of slots whose
--- owner changed; `owner` is updated in place. With fewer than 2 usable
--- servers every slot is emptied (the front must not offer: the retry would
--- come back to the same server).
function _M.assign(owner, up, count)
    local changed = {}
    local n = #up
    if n < 2 then
        for i = 0, count - 1 do
            if owner[i] ~= nil then
                owner[i] = nil
                changed[#changed + 1] = i
            end
        end
        return changed
    end

    -- Slots each usable server holds now; the rest are free.
    local held, free = {}, {}
    for _, name in ipairs(up) do held[name] = {} end
    for i = 0, count - 1 do
        local mine = held[owner[i]]
        if mine then mine[#mine + 1] = i else free[#free + 1] = i end
    end

    -- Quotas: floor(count/n) each, +1 for the (count mod n) servers holding
    -- the most now (ties by name), so a balanced map stays as it is.
    local order = {}
    for i, name in ipairs(up) do order[i] = name end
    tbl_sort(order, function(a, b)
        local ha, hb = #held[a], #held[b]
        if ha ~= hb then return ha > hb end
        return a < b
    end)
    local base, extra = count // n, count % n
    local quota = {}
    for i, name in ipairs(order) do quota[name] = base + (i <= extra and 1 or 0) end

    -- Servers over quota give up their highest slots; servers under take
    -- free slots, lowest first.
    for _, name in ipairs(order) do
        local mine = held[name]
        while #mine > quota[name] do
            free[#free + 1] = mine[#mine]
            mine[#mine] = nil
        end
    end
    tbl_sort(free)
    local next_free = 1
    for _, name in ipairs(order) do
        for _ = #held[name] + 1, quota[name] do
            local slot = free[next_free]
            next_free = next_free + 1
            if owner[slot] ~= name then
                owner[slot] = name
                changed[#changed + 1] = slot
            end
        end
    end
    tbl_sort(changed)
    return changed
end

return _M
