-- wrk script for bench/webhook_load.py: signed issue_comment deliveries, unique delivery ids,
-- one in ten an exact redelivery of an earlier one (same id, same body).
-- BODIES names a file of "<signature>\t<json body>" lines; OUT receives what each thread
-- sent and which deliveries were answered "stored", so the bench can check the inbox.

local threads = {}
local tid_next = 0

function setup(thread)
  tid_next = tid_next + 1
  thread:set("tid", tid_next)
  table.insert(threads, thread)
end

function init(args)
  bodies, sigs = {}, {}
  for line in io.lines(os.getenv("BODIES")) do
    local sig, body = line:match("^([^\t]+)\t(.*)$")
    table.insert(sigs, sig)
    table.insert(bodies, body)
  end
  sent, ids, picks = 0, {}, {}
  run = os.getenv("RUN") or ""  -- a prefix per run: a warm-up's ids never repeat later
  stored, repeats, answered = {}, 0, 0
end

function request()
  sent = sent + 1
  local id, pick
  if sent % 10 == 0 then  -- a redelivery of a delivery five requests back
    id, pick = ids[sent - 5], picks[sent - 5]
  else
    id, pick = run .. tid .. "-" .. sent, (sent % #bodies) + 1
  end
  ids[sent], picks[sent] = id, pick
  return wrk.format("POST", "/webhook", {
    ["Content-Type"] = "application/json",
    ["X-GitHub-Event"] = "issue_comment",
    ["X-GitHub-Delivery"] = id,
    ["X-Hub-Signature-256"] = sigs[pick],
    ["User-Agent"] = "GitHub-Hookshot/wrk",
  }, bodies[pick])
end

function response(status, headers, body)
  answered = answered + 1
  local detail, delivery = body:match('"detail":"([^"]*)","delivery":"([^"]*)"')
  if detail == "stored" then
    table.insert(stored, delivery)
  elseif detail == "already stored" then
    repeats = repeats + 1
  end
end

function done(summary, latency, requests)
  local out = io.open(os.getenv("OUT"), "w")
  out:write(string.format('{"requests": %d, "duration_us": %d, "p50_us": %d, "p99_us": %d, ',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99)))
  out:write(string.format('"errors": %d, "non2xx": %d, "threads": [',
    summary.errors.connect + summary.errors.read + summary.errors.write
      + summary.errors.timeout, summary.errors.status))
  for i, thread in ipairs(threads) do
    local ok = thread:get("stored")
    local quoted = {}
    for _, d in ipairs(ok) do table.insert(quoted, '"' .. d .. '"') end
    out:write(string.format('%s{"tid": %d, "sent": %d, "answered": %d, "repeats": %d, ' ..
      '"stored": [%s]}', i > 1 and ", " or "", thread:get("tid"), thread:get("sent"),
      thread:get("answered"), thread:get("repeats"), table.concat(quoted, ",")))
  end
  out:write("]}\n")
  out:close()
end
