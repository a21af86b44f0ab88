-- The front's map task (role=front map=FILE): keeps FILE current with the
-- usable servers of a backend, keys 0..n-1 (huntlb/upmap.lua), so the config
-- picks a random first candidate with native fetches and no per-request Lua.
local upmap = require "huntlb.upmap"

local core = core
local tonumber = tonumber
local pairs = pairs
local ipairs = ipairs
local str_format = string.format
local str_match = string.match
local tbl_sort = table.sort
local tbl_concat = table.concat
local io_open = io.open

local _M = {}

--- Names of the servers of `be` that can take traffic, sorted: the servers
--- HAProxy's `nbsrv` counts (active, not backup, weight above 0, up).
local function usable_servers(be)
    local up = {}
    for name, srv in pairs(be.servers) do
        local st = srv:get_stats()
        local status = st.status or ""
        -- "UP", "UP 1/2" (going down), "no check"; not DOWN, MAINT, DRAIN, NOLB
        if (str_match(status, "^UP") or status == "no check")
            and tonumber(st.bck) ~= 1 and (tonumber(st.weight) or 0) > 0 then
            up[#up + 1] = name
        end
    end
    tbl_sort(up)
    return up
end

--- What HAProxy loaded from the map file at start (key -> value).
local function read_map(path)
    local f = io_open(path, "r")
    if not f then return {} end -- HAProxy itself names a missing map file
    local text = f:read("a")
    f:close()
    return upmap.parse(text)
end

function _M.start(args)
    local published = nil
    -- key -> server name as HAProxy holds it: the file as loaded, so the first
    -- refresh deletes whatever it held that is not wanted
    local held = read_map(args.map)
    core.register_task(function()
        while true do
            local be = core.backends[args.backend]
            if be then
                local up = usable_servers(be)
                local key = tbl_concat(up, ",")
                if key ~= published then
                    local sets, dels = upmap.diff(held, upmap.wanted(up))
                    for _, kv in ipairs(sets) do
                        core.set_map(args.map, kv[1], kv[2])
                        held[kv[1]] = kv[2]
                    end
                    for _, k in ipairs(dels) do
                        core.del_map(args.map, k)
                        held[k] = nil
                    end
                    local n = #up
                    core.Info(str_format("huntlb: %d usable in backend %s: %s%s; %d keys written, %d deleted",
                        n, args.backend, key, n < 2 and " (not offering: fewer than 2)" or "",
                        #sets, #dels))
                    published = key
                end
            end
            core.msleep(args.every_ms)
        end
    end)
end

return _M
