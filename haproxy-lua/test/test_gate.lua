-- huntlb's gate_new over a fake HAProxy: servers DNS fills stay in maintenance
-- until a probe passes; an address changed in place is held again.
-- Usage (from the repo root): lua5.4 haproxy-lua/test/test_gate.lua
package.path = "haproxy-lua/?.lua;" .. package.path

-- a fake `core` without register_action: the module loads without starting
local servers = {}
core = { backends = { hunt = { servers = servers } }, Info = function() end }
local huntlb = require "huntlb"

local tally = dofile("haproxy-lua/test/tally.lua")
local check = tally.check

local function server(addr)
    local s = { addr = addr, maint = false }
    function s:get_addr() return self.addr end
    function s:set_maint() self.maint = true end
    function s:set_ready() self.maint = false end
    return s
end

local listening = {}
local probes = 0
local g = huntlb.gate({ "hunt" }, function(addr) probes = probes + 1; return listening[addr] == true end)

-- a static server (address from the start) and two empty template slots
servers.web1 = server("10.0.0.1:8080")
servers.web2 = server("<unknown>")
servers.web3 = server("<unknown>")
g.sweep(false)
check(not servers.web1.maint, "a server with an address at start is not held")
check(servers.web2.maint and servers.web3.maint, "empty slots are held at init")
check(probes == 0, "no probe at init")

-- DNS fills web2; nothing listens yet: held, probed each sweep
servers.web2.addr = "10.0.0.2:8080"
g.sweep(true); g.sweep(true)
check(servers.web2.maint, "a named server that does not answer stays held")
check(probes == 2, "probed once per sweep, got " .. probes)
listening["10.0.0.2:8080"] = true
g.sweep(true)
check(not servers.web2.maint, "in service once a probe passes")
g.sweep(true)
check(probes == 3, "no probe once in service, got " .. probes)

-- DNS drops it: held again before the next container gets the slot
servers.web2.addr = "<unknown>"
g.sweep(true)
check(servers.web2.maint, "a dropped slot is held")
servers.web2.addr = "10.0.0.9:8080"
g.sweep(true)
check(servers.web2.maint, "the slot's next container waits for its own probe")

-- an address changed in place (one container for another in one DNS answer)
servers.web1.addr = "10.0.0.7:8080"
g.sweep(true)
check(servers.web1.maint, "an address changed in place is held")
listening["10.0.0.7:8080"] = true
g.sweep(true)
check(not servers.web1.maint, "and let in after its probe")

-- one container in two backends: probed once per sweep
core.backends.least = { servers = { web1 = server("<unknown>") } }
servers.web3.addr = "<unknown>"
local g2 = huntlb.gate({ "hunt", "least" }, function(addr) probes = probes + 1; return false end)
g2.sweep(false)
servers.web3.addr = "10.0.0.5:8080"
core.backends.least.servers.web1.addr = "10.0.0.5:8080"
probes = 0
g2.sweep(true)
check(probes == 1, "one probe for an address held in two backends, got " .. probes)

-- the arg
local args = huntlb.parse_args({ "role=front backend=hunt gate_new=hunt,least,random" })
check(args and #args.gate_new == 3 and args.gate_new[3] == "random", "gate_new parses to a list")

tally.done("gate")
