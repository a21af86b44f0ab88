-- Runs policy/vectors/*.json against huntlb.policy, exactly as the Rust test does.
-- Usage (from the repo root): lua5.4 haproxy-lua/test/run_vectors.lua
-- Prints "N passed, M failed" and exits non-zero on any failure.
package.path = "haproxy-lua/?.lua;haproxy-lua/test/?.lua;" .. package.path
local policy = require "huntlb.policy"
local json = require "json"

local passed, failed = 0, 0
local function check(ok, msg)
    if ok then passed = passed + 1 else failed = failed + 1; io.stderr:write("FAIL: ", msg, "\n") end
end

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
                local got = p:decide(step.try, step.busy, case.workers)
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
            if got ~= step.expect or (step.c ~= nil and p:threshold() ~= step.c) then
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
        for _, k in ipairs({ "c", "window", "low", "high", "c0", "c_max" }) do
            if v[k] ~= nil and p[k] ~= v[k] then ok = false end
        end
    end
    check(ok, "valid spec `" .. v.spec .. "`: " .. tostring(err))
end
for _, v in ipairs(specs.invalid) do
    local p, err, key = policy.parse(v.spec)
    check(p == nil and key == v.key, "invalid spec `" .. v.spec .. "` want key " .. v.key .. ", got " .. tostring(key) .. " (" .. tostring(err) .. ")")
end

for i, c in ipairs(load("classify.json").cases) do
    local got = policy.classify(c.offer, c.target, c.attempt)
    check(got == c.class, string.format("classify case %d: got %s want %s", i, got, c.class))
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

print(string.format("%s: %d passed, %d failed", _VERSION:gsub(" ", ""), passed, failed))
os.exit(failed == 0 and 0 or 1)
