-- The front's DNS gate (role=front gate_new=BACKEND[,BACKEND...]): a server
-- that DNS has just named stays in maintenance until it answers one health
-- probe. `gate(names, probe)` is the state machine (tested without HAProxy,
-- test/test_gate.lua); `start` runs it every 50 ms.
local core = core
local tonumber = tonumber
local pairs = pairs
local ipairs = ipairs
local error = error
local str_format = string.format
local str_match = string.match

local _M = {}

-- gate_new: HAProxy (2.6 to 3.0; `init-state down` is 3.1's) puts a server that
-- DNS has just named in service at once, before any check: leaving maintenance
-- it sets its health to `rise` ("start OK but check immediately", server.c
-- srv_update_status). The gate keeps such servers in forced maintenance until
-- one health probe of the new address answers 200.
local GATE_EVERY_MS = 50
local GATE_PATH = "/.hunt/health"

--- One health probe: true if ADDR ("ip:port") answers GATE_PATH with 200.
local function probe(addr)
    local ip, port = str_match(addr, "^(.+):(%d+)$")
    if not ip then return false end
    local s = core.tcp()
    s:settimeout(0.25)   -- the fronts' `timeout connect`
    if not s:connect(ip, tonumber(port)) then
        s:close()
        return false
    end
    s:send("GET " .. GATE_PATH .. " HTTP/1.0\r\n\r\n")
    local line = s:receive("*l")
    s:close()
    return line ~= nil and str_match(line, "^HTTP/1%.%d 200") ~= nil
end

--- The gate's state for backends NAMES: `held` (servers it keeps in
--- maintenance), `seen` (the address each other server had). `sweep(go)`
--- first holds (no I/O, so a probe never delays a hold), then, with go true
--- (not at init), probes the held servers that have an address, each address once.
function _M.gate(names, probe_fn)
    local held, seen, failed = {}, {}, {}
    local g = { held = held, seen = seen }
    function g.sweep(go)
        local named = {}
        for _, bname in ipairs(names) do
            local be = core.backends[bname]
            for sname, srv in pairs(be and be.servers or {}) do
                local key = bname .. "/" .. sname
                local addr = srv:get_addr()
                if addr == "<unknown>" then
                    -- no address (yet, or DNS dropped it): hold it before DNS fills it
                    if not held[key] then
                        srv:set_maint()
                        held[key] = true
                    end
                    seen[key], failed[key] = nil, nil
                else
                    if not held[key] and seen[key] and seen[key] ~= addr then
                        -- the address changed in place (one container for another): hold it
                        srv:set_maint()
                        held[key] = true
                        core.Info(str_format("huntlb: %s now %s (was %s): held until it answers a health probe",
                            key, addr, seen[key]))
                    end
                    seen[key] = addr
                    if held[key] then
                        named[#named + 1] = { key, srv, addr }
                    end
                end
            end
        end
        if not go then return end
        -- one probe per address per sweep: the same container fills a slot in
        -- each backend, and a silent one costs the probe's timeout
        local answered = {}
        for _, n in ipairs(named) do
            local key, srv, addr = n[1], n[2], n[3]
            if answered[addr] == nil then
                answered[addr] = probe_fn(addr)
            end
            if answered[addr] then
                srv:set_ready()
                held[key] = nil
                core.Info(str_format("huntlb: %s (%s) answered a health probe: in service (%d probes unanswered before)",
                    key, addr, failed[key] or 0))
                failed[key] = nil
            else
                failed[key] = (failed[key] or 0) + 1
            end
        end
    end
    return g
end

function _M.start(args)
    local g = _M.gate(args.gate_new, probe)
    core.register_init(function()
        for _, name in ipairs(args.gate_new) do
            if not core.backends[name] then
                error(str_format("huntlb: arg `gate_new`: no backend named `%s`", name))
            end
        end
        -- before the first DNS answer: every slot without an address is held
        g.sweep(false)
    end)
    core.register_task(function()
        while true do
            g.sweep(true)
            core.msleep(GATE_EVERY_MS)
        end
    end)
end

return _M
