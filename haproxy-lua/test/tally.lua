-- The Lua tests' one tally: `check(ok, msg)` counts a check and writes a
-- failure to stderr; `done(label)` prints the count and exits non-zero if any
-- check failed. Usage: local tally = dofile("haproxy-lua/test/tally.lua")
local M = { checks = 0, failed = 0 }

function M.check(ok, msg)
    M.checks = M.checks + 1
    if not ok then
        M.failed = M.failed + 1
        io.stderr:write("FAIL: ", msg, "\n")
    end
end

function M.done(label)
    print(string.format("%s: %d checks, %d failed", label, M.checks, M.failed))
    os.exit(M.failed == 0 and 0 or 1)
end

return M
