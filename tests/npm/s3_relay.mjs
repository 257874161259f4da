// An S3-compatible server for the object-store tests: s3rver on 127.0.0.1 (port 0), filled by
// an independent client (the AWS SDK for JavaScript), behind a relay of our own that answers
// what s3rver does not the way real S3 does, and injects faults:
//
// - it verifies every request's SigV4 signature (s3rver does not) with the secret given, and
//   refuses a wrong one with S3's 403 SignatureDoesNotMatch, an unknown key with
//   InvalidAccessKeyId, and an unsigned request with AccessDenied, except in bucket "public";
// - it answers If-Match against the ETag of the version a GET reads (s3rver ignores it): 412;
// - on demand (POST /__relay/faults?p503=P&preset=P&stall=MS&pput=P&latency=MS&seed=N) it answers
//   a share P of object GETs with 503 SlowDown, cuts a share of answers mid-body (the connection
//   reset), holds the first GET after the call for MS milliseconds, answers a share of PUTs with
//   503 SlowDown (pput), and holds every object GET for latency milliseconds (a distant store:
//   requests meant to overlap do, however slowly the client runs);
// - POST /__relay/replace?key=BUCKET/KEY puts new content for the key (its ETag changes);
// - POST /__relay/pagesize?n=N cuts listings into pages of at most N keys (0: s3rver's own), the
//   relay paginating itself with continuation tokens of its own (s3rver 3.7's need a legacy
//   cipher on Node 20);
// - it forwards request bodies (a PUT's object) and checks each against its signed
//   x-amz-content-sha256, refusing a mismatch with S3's 400 XAmzContentSHA256Mismatch;
// - GET /__relay/stats reports the requests counted since the start (or POST /__relay/reset):
//   {"list": N, "get": N, "put": N, "delete": N, "other": N, "inflight": N,
//   "status": {"200": N, ...}, "faults": {...}, "puts": [...]}, inflight the most GETs of one
//   object that were in flight at once, puts the PUTs in the order they came, each
//   {"key": "BUCKET/KEY", "begin": SEQ, "end": SEQ, "status": CODE}, where SEQ numbers the
//   events of PUTs (a PUT's arrival, its answer from the server) in the order they happened;
//   "answered": {"/BUCKET/KEY": N} counts each object's GETs whose answer was sent whole;
//
//   node s3_relay.mjs DATADIR ACCESS_KEY SECRET [--tls CERT KEY]
//
// Every file under DATADIR/BUCKET/ is put as s3://BUCKET/PATH. Prints "s3_relay: s3rver itself on
// http://127.0.0.1:PORT" (for benchmarks that read s3rver through no relay) and then "s3_relay:
// listening on 127.0.0.1:PORT" once the objects are in, then serves until a signal or its parent ends.
import S3rver from 's3rver';
import { S3Client, CreateBucketCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';

const [dataDir, accessKey, secret, ...rest] = process.argv.slice(2);
if (!dataDir || !accessKey || !secret) {
  console.error('usage: s3_relay.mjs DATADIR ACCESS_KEY SECRET [--tls CERT KEY]');
  process.exit(2);
}
let tls = null;
if (rest[0] === '--tls') tls = { cert: fs.readFileSync(rest[1]), key: fs.readFileSync(rest[2]) };

const store = fs.mkdtempSync(path.join(os.tmpdir(), 's3rver-'));
const s3rver = new S3rver({ port: 0, address: '127.0.0.1', silent: true, directory: store });
const { port: upPort } = await s3rver.run();
const upstream = `http://127.0.0.1:${upPort}`;
const client = new S3Client({
  endpoint: upstream,
  region: 'us-east-1',
  forcePathStyle: true,
  credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
});

function walk(dir) {
  const out = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...walk(p));
    else if (e.isFile()) out.push(p);
  }
  return out;
}
for (const b of fs.readdirSync(dataDir, { withFileTypes: true })) {
  if (!b.isDirectory()) continue;
  await client.send(new CreateBucketCommand({ Bucket: b.name }));
  const root = path.join(dataDir, b.name);
  for (const f of walk(root)) {
    const key = path.relative(root, f).split(path.sep).join('/');
    await client.send(new PutObjectCommand({ Bucket: b.name, Key: key, Body: fs.readFileSync(f) }));
  }
}

// ---- Counting and faults -------------------------------------------------------------------
let stats;
let putSeq = 0;
function resetStats() {
  stats = {
    list: 0,
    get: 0,
    put: 0,
    delete: 0,
    other: 0,
    inflight: 0,
    status: {},
    faults: { s503: 0, reset: 0, stall: 0 },
    puts: [],
    answered: {},
  };
  putSeq = 0;
}
resetStats();
let faults = { p503: 0, preset: 0, stall: 0, pput: 0, latency: 0 };
let pageSize = 0;
const inflight = new Map();
// Objects (paths) whose PUT the server is still writing -> that PUT's upstream request.
const writing = new Map();
let rng = 1;
function random() {
  // xorshift32: the same faults for the same seed.
  rng ^= rng << 13;
  rng >>>= 0;
  rng ^= rng >>> 17;
  rng ^= rng << 5;
  rng >>>= 0;
  return rng / 4294967296;
}

function xmlError(res, status, code, message) {
  stats.status[status] = (stats.status[status] || 0) + 1;
  const body =
    '<?xml version="1.0" encoding="UTF-8"?>\n' +
    `<Error><Code>${code}</Code><Message>${message}</Message><RequestId>0</RequestId></Error>`;
  res.writeHead(status, { 'Content-Type': 'application/xml', 'Content-Length': body.length });
  res.end(body);
}

// ---- SigV4 ---------------------------------------------------------------------------------
const enc = (s) =>
  encodeURIComponent(s).replace(/[!'()*]/g, (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase());
const sha256 = (s) => crypto.createHash('sha256').update(s).digest('hex');
const hmac = (k, s) => crypto.createHmac('sha256', k).update(s).digest();

// Returns null when the request is signed correctly (and its body is the one signed), else
// [status, code, message].
function verify(req, body) {
  const auth = req.headers.authorization;
  const bucket = req.url.split('?')[0].split('/')[1];
  if (!auth) {
    if (bucket === 'public') return null;
    return [403, 'AccessDenied', 'Access Denied'];
  }
  const m = /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/s3\/aws4_request, ?SignedHeaders=([^,]+), ?Signature=([0-9a-f]{64})$/.exec(
    auth,
  );
  if (!m) return [400, 'AuthorizationHeaderMalformed', 'The authorization header is malformed.'];
  const [, key, date, region, signed, signature] = m;
  if (key !== accessKey)
    return [403, 'InvalidAccessKeyId', 'The AWS Access Key Id you provided does not exist in our records.'];
  const amzDate = req.headers['x-amz-date'];
  const payload = req.headers['x-amz-content-sha256'];
  const names = signed.split(';');
  if (!amzDate || !amzDate.startsWith(date) || !names.includes('host') || !names.includes('x-amz-date'))
    return [403, 'AccessDenied', 'Host and x-amz-date must be signed.'];
  if (!payload) return [400, 'InvalidRequest', 'Missing required header for this request: x-amz-content-sha256'];
  const [rawPath, rawQuery = ''] = req.url.split(/\?(.*)/s);
  const query = rawQuery
    .split('&')
    .filter((p) => p !== '')
    .map((p) => {
      const [k, v = ''] = p.split(/=(.*)/s);
      return [enc(decodeURIComponent(k)), enc(decodeURIComponent(v))];
    })
    .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0))
    .map(([k, v]) => `${k}=${v}`)
    .join('&');
  const headers = names.map((n) => `${n}:${String(req.headers[n] ?? '').trim().replace(/\s+/g, ' ')}\n`).join('');
  const canonical = [req.method, rawPath, query, headers, signed, payload].join('\n');
  const scope = `${date}/${region}/s3/aws4_request`;
  const toSign = ['AWS4-HMAC-SHA256', amzDate, scope, sha256(canonical)].join('\n');
  const k = hmac(hmac(hmac(hmac('AWS4' + secret, date), region), 's3'), 'aws4_request');
  const want = crypto.createHmac('sha256', k).update(toSign).digest('hex');
  if (want !== signature)
    return [
      403,
      'SignatureDoesNotMatch',
      'The request signature we calculated does not match the signature you provided. Check your key and signing method.',
    ];
  if (payload !== 'UNSIGNED-PAYLOAD' && crypto.createHash('sha256').update(body).digest('hex') !== payload)
    return [400, 'XAmzContentSHA256Mismatch', "The provided 'x-amz-content-sha256' header does not match what was computed."];
  return null;
}

// ---- Upstream --------------------------------------------------------------------------------
function upstreamRequest(method, url, headers, body) {
  return new Promise((resolve, reject) => {
    const r = http.request(upstream + url, { method, headers }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    r.on('error', reject);
    r.end(body && body.length ? body : undefined);
  });
}

// The whole body of a request (empty for a GET).
function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

async function control(req, res, url) {
  const q = url.searchParams;
  if (url.pathname === '/__relay/stats') {
    res.writeHead(200, { 'Content-Type': 'application/json' });
    return res.end(JSON.stringify(stats));
  }
  if (url.pathname === '/__relay/reset') {
    resetStats();
    faults = { p503: 0, preset: 0, stall: 0, pput: 0, latency: 0 };
    pageSize = 0;
    return res.end('ok\n');
  }
  if (url.pathname === '/__relay/faults') {
    faults = {
      p503: Number(q.get('p503') || 0),
      preset: Number(q.get('preset') || 0),
      stall: Number(q.get('stall') || 0),
      pput: Number(q.get('pput') || 0),
      latency: Number(q.get('latency') || 0),
    };
    rng = Number(q.get('seed') || 1) >>> 0 || 1;
    return res.end('ok\n');
  }
  if (url.pathname === '/__relay/pagesize') {
    pageSize = Number(q.get('n') || 0);
    return res.end('ok\n');
  }
  if (url.pathname === '/__relay/replace') {
    const [bucket, ...k] = q.get('key').split('/');
    await client.send(new PutObjectCommand({ Bucket: bucket, Key: k.join('/'), Body: `replaced at ${Date.now()}\n` }));
    return res.end('ok\n');
  }
  res.writeHead(404);
  res.end();
}

async function handle(req, res) {
  const url = new URL(req.url, 'http://relay');
  if (url.pathname.startsWith('/__relay/')) return control(req, res, url);
  const isList = req.method === 'GET' && url.searchParams.get('list-type') === '2';
  const isGet = req.method === 'GET' && !isList && url.pathname.split('/').length > 2;
  const isPut = req.method === 'PUT' && url.pathname.split('/').length > 2;
  if (isList) stats.list++;
  else if (isGet) stats.get++;
  else if (isPut) stats.put++;
  else if (req.method === 'DELETE') stats.delete++;
  else stats.other++;
  let put = null;
  if (isPut) {
    put = { key: decodeURIComponent(url.pathname.slice(1)), begin: ++putSeq, end: 0, status: 0 };
    stats.puts.push(put);
  }
  const body = await readBody(req);
  if (isGet) {
    // The most GETs of one object in flight at once (until each answer is sent or cut).
    const key = url.pathname;
    inflight.set(key, (inflight.get(key) || 0) + 1);
    stats.inflight = Math.max(stats.inflight, inflight.get(key));
    res.on('close', () => inflight.set(key, inflight.get(key) - 1));
    res.on('finish', () => { stats.answered[key] = (stats.answered[key] || 0) + 1; });
  }
  const refused = verify(req, body);
  if (refused) {
    if (put) Object.assign(put, { end: ++putSeq, status: refused[0] });
    return xmlError(res, ...refused);
  }
  if (isGet && faults.stall > 0) {
    const ms = faults.stall;
    faults.stall = 0;
    stats.faults.stall++;
    await new Promise((r) => setTimeout(r, ms));
  }
  if (isGet && faults.latency > 0) await new Promise((r) => setTimeout(r, faults.latency));
  if (put && faults.pput > 0 && random() < faults.pput) {
    stats.faults.s503++;
    Object.assign(put, { end: ++putSeq, status: 503 });
    return xmlError(res, 503, 'SlowDown', 'Please reduce your request rate.');
  }
  if (isGet && faults.p503 > 0 && random() < faults.p503) {
    stats.faults.s503++;
    return xmlError(res, 503, 'SlowDown', 'Please reduce your request rate.');
  }
  const headers = {};
  for (const [k, v] of Object.entries(req.headers))
    if (k !== 'authorization' && !k.startsWith('x-amz-') && k !== 'if-match' && k !== 'host' && k !== 'expect')
      headers[k] = v;
  // s3rver writes an object to its file as the PUT's body arrives, so a GET or a listing during
  // a PUT would see a partial object, which S3 never shows: they wait for the PUTs in progress
  // (of that object; of any object for a listing), as if they came after them.
  if (isList) await Promise.allSettled([...writing.values()]);
  else if (!isPut && writing.has(url.pathname)) await writing.get(url.pathname).catch(() => {});
  if (isList && pageSize > 0) return listPage(res, url, headers);
  let up;
  if (isPut) {
    const pending = upstreamRequest(req.method, req.url, headers, body);
    writing.set(url.pathname, pending);
    try {
      up = await pending;
    } finally {
      if (writing.get(url.pathname) === pending) writing.delete(url.pathname);
    }
  } else {
    up = await upstreamRequest(req.method, req.url, headers, body);
  }
  if (put) Object.assign(put, { end: ++putSeq, status: up.status });
  // If-Match is judged on the answer itself (its ETag; for one without, such as a 416, the
  // object's ETag after it), so an object replaced between a check and the read cannot slip
  // through, as on S3, where the two are one.
  if (isGet && req.headers['if-match']) {
    let etag = up.headers.etag;
    if (!etag) {
      const head = await upstreamRequest('HEAD', req.url, {});
      if (head.status === 200) etag = head.headers.etag;
    }
    if (etag && etag !== req.headers['if-match'])
      return xmlError(res, 412, 'PreconditionFailed', 'At least one of the pre-conditions you specified did not hold');
  }
  stats.status[up.status] = (stats.status[up.status] || 0) + 1;
  const out = { ...up.headers };
  delete out['transfer-encoding'];
  delete out.connection;
  out['content-length'] = up.body.length;
  if (isGet && up.body.length > 1 && faults.preset > 0 && random() < faults.preset) {
    stats.faults.reset++;
    res.writeHead(up.status, out);
    res.write(up.body.subarray(0, up.body.length >> 1), () => setTimeout(() => res.socket.destroy(), 10));
    return;
  }
  res.writeHead(up.status, out);
  res.end(up.body);
}

// One page of pageSize keys after the continuation token (the last key of the page before, in
// base64url), cut from s3rver's whole listing of the prefix.
async function listPage(res, url, headers) {
  const up = await upstreamRequest('GET', `${url.pathname}?list-type=2&prefix=${encodeURIComponent(url.searchParams.get('prefix') || '')}`, headers);
  stats.status[up.status] = (stats.status[up.status] || 0) + 1;
  const xml = up.body.toString('utf8');
  if (up.status !== 200) {
    res.writeHead(up.status, { 'Content-Type': 'application/xml' });
    return res.end(xml);
  }
  const token = url.searchParams.get('continuation-token');
  const after = token ? Buffer.from(token, 'base64url').toString('utf8') : null;
  const all = [...xml.matchAll(/<Contents>[\s\S]*?<\/Contents>/g)].map((m) => m[0]);
  const keyOf = (c) => c.match(/<Key>([\s\S]*?)<\/Key>/)[1].replace(/&amp;/g, '&').replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&quot;/g, '"').replace(/&apos;/g, "'");
  const rest = after === null ? all : all.filter((c) => keyOf(c) > after);
  const page = rest.slice(0, pageSize);
  const more = rest.length > page.length;
  const next = more ? `<NextContinuationToken>${Buffer.from(keyOf(page[page.length - 1])).toString('base64url')}</NextContinuationToken>` : '';
  const body = `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><IsTruncated>${more}</IsTruncated>${page.join('')}<KeyCount>${page.length}</KeyCount><MaxKeys>${pageSize}</MaxKeys>${next}</ListBucketResult>`;
  res.writeHead(200, { 'Content-Type': 'application/xml', 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}

const serve = (req, res) =>
  handle(req, res).catch((e) => {
    if (!res.headersSent) xmlError(res, 500, 'InternalError', String(e.message || e).replace(/[<&]/g, ' '));
    else res.destroy();
  });
const server = tls ? https.createServer(tls, serve) : http.createServer(serve);
server.keepAliveTimeout = 30000;
server.listen(0, '127.0.0.1', () => {
  console.log(`s3_relay: s3rver itself on ${upstream}`);
  console.log(`s3_relay: listening on 127.0.0.1:${server.address().port}`);
});

async function stop() {
  server.close();
  await s3rver.close();
  fs.rmSync(store, { recursive: true, force: true });
  process.exit(0);
}
// Ends with the process that started it.
setInterval(() => {
  if (process.ppid === 1) stop();
}, 500);
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
