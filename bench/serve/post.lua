-- wrk script: POST the body in $STRATO_BODY with Inference-Header-Content-Length $STRATO_HL (binary tensor extension).
local f = assert(io.open(os.getenv("STRATO_BODY"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*all")
f:close()
wrk.headers["Content-Type"] = "application/octet-stream"
wrk.headers["Inference-Header-Content-Length"] = os.getenv("STRATO_HL")
