-- Runs policy/vectors/*.json against huntlb.policy, exactly as the Rust test does.
-- Usage (from the repo root): lua5.4 haproxy-lua/test/run_vectors.lua
-- Prints "N checks, M failed" and exits non-zero on any failure.
package.path = "haproxy-lua/?.lua;haproxy-lua/test/?.lua;" .. package.path
local policy = require "huntlb.policy"
local json = require "json"

local tally = dofile("haproxy-lua/test/tally.lua")
local check = tally.check

local function load(name)
    local f = assert(io.open("policy/vectors/" .. name, "r"))
    local doc = json.decode(f:read("a"))
    f:close()
    return doc
end

for _, file in ipairs({ "static.json", "dynamic.json" }) do
    for _, case in ipairs(load(file).cases) do
        local p = policy.new(case.policy)
        local ok_case = true
        for i, step in ipairs(case.steps) do
            for r = 1, step["repeat"] or 1 do
                local got = p:decide(step.try, step.busy, case.workers, step.seen)
                local want = step.expect == "accept"
                if got ~= want then
                    ok_case = false
                    io.stderr:write(string.format("%s `%s` step %d repeat %d: got %s\n", file, case.name, i, r, tostring(got)))
                end
                if step.c ~= nil and p:threshold() ~= step.c then
                    ok_case = false
                    io.stderr:write(string.format("%s `%s` step %d repeat %d: c=%s want %s\n", file, case.name, i, r, tostring(p:threshold()), step.c))
                end
            end
        end
        check(ok_case, file .. " " .. case.name)
    end
end

for _, case in ipairs(load("admission.json").cases) do
    local p = policy.new(case.policy)
    local ok_case = true
    for i, step in ipairs(case.steps) do
        for r = 1, step["repeat"] or 1 do
            local verdict, why = p:admit(step.try, step.gates, step.busy, case.workers)
            local got = why and (verdict .. ":" .. why) or verdict
            if got ~= step.expect or (step.c ~= nil and p:threshold() ~= step.c)
                or (step.is_busy ~= nil and p:is_busy(step.busy) ~= step.is_busy) then
                ok_case = false
                io.stderr:write(string.format("admission.json `%s` step %d repeat %d: got %s c=%s\n", case.name, i, r, got, tostring(p:threshold())))
            end
        end
    end
    check(ok_case, "admission.json " .. case.name)
end

local specs = load("specs.json")
for _, v in ipairs(specs.valid) do
    local p, err = policy.parse(v.spec)
    local ok = p ~= nil and p.kind == v.kind
    if ok then
        for _, k in ipairs({ "c", "window", "low", "high", "c0", "c_max", "c_min", "seen_margin" }) do
            if v[k] ~= nil and p[k] ~= v[k] then ok = false end
        end
    end
    check(ok, "valid spec `" .. v.spec .. "`: " .. tostring(err))
    -- an old key name parses, and the host is given the line to log about it
    local warning = policy.warning(v.spec)
    check(warning == v.warning, "spec `" .. v.spec .. "` warning: got " .. tostring(warning) .. ", want " .. tostring(v.warning))
end
-- the old name is the same policy, key for key, under the new name only
do
    local old, new = policy.parse("dynamic:c0=2,slack=1"), policy.parse("dynamic:c0=2,seen_margin=1")
    local same = old ~= nil and new ~= nil and old.slack == nil
    for _, k in ipairs({ "kind", "window", "low", "high", "c0", "c_max", "c_min", "seen_margin" }) do
        same = same and old[k] == new[k]
    end
    check(same, "dynamic:slack=1 parses to dynamic:seen_margin=1")
    check(policy.warning("dynamic:seen_margin=1") == nil and policy.warning("static:4") == nil and policy.warning(nil) == nil,
        "no warning for a spec in current names")
end
for _, v in ipairs(specs.invalid) do
    local p, err, key = policy.parse(v.spec)
    check(p == nil and key == v.key, "invalid spec `" .. v.spec .. "` want key " .. v.key .. ", got " .. tostring(key) .. " (" .. tostring(err) .. ")")
end

for i, c in ipairs(load("classify.json").cases) do
    local got = policy.classify(c.offer, c.target, c.attempt)
    check(got == c.class, string.format("classify case %d: got %s want %s", i, got, c.class))
end

for i, c in ipairs(load("seen.json").cases) do
    local got = policy.parse_seen(c.values)
    local want = c.seen
    check(got == want, string.format("seen case %d: got %s want %s", i, tostring(got), tostring(want)))
end

for i, c in ipairs(load("front.json").cases) do
    local got = policy.parse_front(c.values)
    check(got == c.front, string.format("front case %d: got %s want %s", i, tostring(got), tostring(c.front)))
end

local function show(args)
    local parts = {}
    for k, v in pairs(args) do parts[#parts + 1] = k .. "=" .. v end
    table.sort(parts)
    return "{" .. table.concat(parts, " ") .. "}"
end

local settings = load("settings.json")
for _, v in ipairs(settings.valid) do
    local st, err = policy.settings(v.args, settings.default_id)
    local ok = st ~= nil and st.policy.p.kind == v.kind and st.workers == v.workers and st.id == v.id
        and (v.c == nil or st.policy:threshold() == v.c) and st.policy.p.seen_margin == v.seen_margin
    check(ok, "valid settings " .. show(v.args) .. ": " .. tostring(err))
    local want = v.warning and ("`policy`: " .. v.warning)
    check(st ~= nil and st.warning == want, "settings " .. show(v.args) .. " warning: got " .. tostring(st and st.warning) .. ", want " .. tostring(want))
end
for _, v in ipairs(settings.invalid) do
    local st, err, key = policy.settings(v.args, settings.default_id)
    check(st == nil and key == v.key, "invalid settings " .. show(v.args) .. " want key " .. v.key .. ", got " .. tostring(key) .. " (" .. tostring(err) .. ")")
end

-- the metric table is the Rust one, and the sidecar exports exactly its sidecar rows
local metrics = require "huntlb.metrics"
local listed = load("metrics.json").metrics
check(#listed == #metrics.ALL, "metrics.json has " .. #listed .. " rows, huntlb.metrics " .. #metrics.ALL)
local sidecar_names = {}
for i, want in ipairs(listed) do
    local got = metrics.ALL[i] or {}
    local same = got.name == want.name and got.kind == want.kind and got.sidecar == want.sidecar and got.label == want.label
        and #(got.values or {}) == #(want.values or {})
    for j, lv in ipairs(want.values or {}) do same = same and got.values[j] == lv end
    check(same, "metric row " .. i .. ": " .. tostring(got.name) .. " vs " .. want.name)
    if want.sidecar then sidecar_names[want.name] = true end
end
local huntlb = require "huntlb"
for _, spec in ipairs({ "dynamic", "always" }) do
    local counts = { offers_accept = 1, offers_refuse = 2, finals = 3, finals_busy = 1, plain = 4, malformed = 0 }
    local text = metrics.render(huntlb.sidecar_samples(counts, policy.new(spec), 32, 5))
    local seen = {}
    for name in text:gmatch("# TYPE (%S+)") do
        seen[name] = true
        check(sidecar_names[name], "sidecar exports " .. name .. ", not a sidecar metric")
    end
    for name in pairs(sidecar_names) do
        -- policy_c is absent with `always` (no threshold), as from the agent
        check(seen[name] or (spec == "always" and name == "huntlb_policy_c"), "sidecar (" .. spec .. ") lacks " .. name)
    end
    check(text:find('huntlb_offers_total{decision="refuse"} 2', 1, true) ~= nil, "rendered offers: " .. text)
end

-- new() must raise, naming the key
local ok, err = pcall(policy.new, "dynamic:window=0")
check(not ok and string.find(err, "`window`", 1, true) ~= nil, "new() raises naming the key: " .. tostring(err))

-- the module writes no globals
local before = {}
for k in pairs(_G) do before[k] = true end
local fresh = dofile("haproxy-lua/huntlb/policy.lua")
fresh.new("dynamic"):decide("offer", 0, 32)
for k in pairs(_G) do check(before[k], "global written: " .. tostring(k)) end

tally.done((_VERSION:gsub(" ", "")))
