-- wrk script: POST AdmissionReviews as the API server does (Content-Type: application/json).
-- Arguments after `--`: one or more PATH=FILE pairs, e.g. /mutate=bench/corpus/x.json;
-- with several (and BENCH_ROTATE=1 in the environment, which wrk must know before init),
-- each thread's requests rotate through them; with one, the request is static (cheapest).
-- done() prints one line `BENCH-JSON {...}` that bench/wrk.py reads (latencies in µs).

local requests_ = {}
local next_ = 1

function init(args)
  for _, pair in ipairs(args) do
    local path, file = pair:match("^([^=]+)=(.+)$")
    local f = assert(io.open(file, "rb"))
    local body = f:read("*a")
    f:close()
    local headers = { ["Host"] = wrk.headers["Host"], ["Content-Type"] = "application/json" }
    table.insert(requests_, wrk.format("POST", path, headers, body))
    wrk.method, wrk.path, wrk.body = "POST", path, body
    wrk.headers["Content-Type"] = "application/json"
  end
end

if os.getenv("BENCH_ROTATE") then
  function request()
    local r = requests_[next_]
    next_ = next_ % #requests_ + 1
    return r
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH-JSON {"requests":%d,"duration_us":%d,"bytes":%d,"connect_errors":%d,' ..
    '"read_errors":%d,"write_errors":%d,"status_errors":%d,"timeouts":%d,' ..
    '"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d,"max_us":%d,"mean_us":%.1f}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write,
    e.status, e.timeout, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9), latency.max, latency.mean))
end
