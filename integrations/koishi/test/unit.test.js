// @ts-check
'use strict'
// The pure parts: the SSE parser, the backoff, error classification, the default reporter name,
// the message counter.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { SseParser, backoff, isOutage, HttpError, NetworkError } = require('../src/client')
const { isUnique } = require('../src/applier')
const { defaultReporter, Config } = require('../src')
const { MessageCounter, normalize, validChannel, WINDOW, TIME_TOLERANCE, MAX_COUNT } = require('../src/messages')

test('SSE: events, multi-line data, comments, CRLF, any chunking', () => {
  const text = ': keep-alive\n\nevent: snapshot\ndata: {"version":3,\ndata: "assignments":{}}\n\n'
    + ':\r\nevent: changes\r\ndata: {"version":4}\r\n\r\ndata: plain\n\n'
  const expected = [
    ['snapshot', '{"version":3,\n"assignments":{}}'],
    ['changes', '{"version":4}'],
    ['message', 'plain'],
  ]
  for (const size of [1, 2, 3, 7, text.length]) {
    /** @type {string[][]} */
    const got = []
    const parser = new SseParser((event, data) => got.push([event, data]))
    for (let i = 0; i < text.length; i += size) parser.push(text.slice(i, i + size))
    assert.deepEqual(got, expected, `chunks of ${size}`)
  }
})

test('backoff: 1 s doubling to 30 s, up to 25 % jitter below', () => {
  const lo = (/** @type {number} */ n) => backoff(n, 1000, 30000, () => 1)
  const hi = (/** @type {number} */ n) => backoff(n, 1000, 30000, () => 0)
  assert.deepEqual([0, 1, 2, 3, 4, 5, 6, 50].map(hi), [1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000])
  assert.deepEqual([0, 1, 5].map(lo), [750, 1500, 22500])
})

test('outages vs refusals; UNIQUE errors of every driver', () => {
  assert.ok(isOutage(new NetworkError('ECONNREFUSED')))
  assert.ok(isOutage(new HttpError('GET', '/', 503, '')))
  assert.ok(isOutage(new HttpError('GET', '/', 401, '')))
  assert.ok(!isOutage(new HttpError('PUT', '/', 400, 'bots[0].id: missing field')))
  assert.ok(!isOutage(new HttpError('POST', '/', 409, '')))
  assert.ok(isUnique(new Error('UNIQUE constraint failed: channel.id, channel.platform')))
  assert.ok(isUnique(new Error("Duplicate entry '1-onebot' for key 'PRIMARY'")))
  assert.ok(isUnique(new Error('duplicate key value violates unique constraint "channel_pkey"')))
  assert.ok(!isUnique(new Error('disk I/O error')))
})

test('default reporter name: valid for the service, stable per directory, distinct across directories', () => {
  const a = defaultReporter('/srv/koishi-a')
  assert.match(a, /^[A-Za-z0-9_.:-]+$/)
  assert.equal(a, defaultReporter('/srv/koishi-a'))
  assert.notEqual(a, defaultReporter('/srv/koishi-b'))
})

test('config schema: defaults, and a bad reporter name is refused', () => {
  const c = Config({})
  assert.equal(c.endpoint, 'http://127.0.0.1:8787')
  assert.equal(c.heartbeatInterval, 10000)
  assert.equal(c.batchSize, 100)
  assert.equal(c.retryMin, 1000)
  assert.equal(c.retryMax, 30000)
  assert.throws(() => Config({ reporter: 'a b' }))
})

test('config schema: messageReportInterval defaults to 10 s, 0 turns it off, negative is refused', () => {
  assert.equal(Config({}).messageReportInterval, 10)
  assert.equal(Config({ messageReportInterval: 0 }).messageReportInterval, 0)
  assert.equal(Config({ messageReportInterval: 2.5 }).messageReportInterval, 2.5)
  assert.throws(() => Config({ messageReportInterval: -1 }))
})

test('message counter: copies of one message counted once, identical messages each, windows and caps', () => {
  let now = 1_000_000
  const c = new MessageCounter({ now: () => now, maxRecent: 100, maxChannels: 3 })
  // two bots, the same message (OneBot: the same time; message ids would differ): one message
  assert.equal(c.seen('onebot', 'g1', 'A', 'u', 'hi', 5000), true) // the first pending count
  assert.equal(c.seen('onebot', 'g1', 'B', 'u', 'hi', 5000), false)
  // a user repeating the same text in the same second: each bot's copies count once per message
  c.seen('onebot', 'g1', 'A', 'u', 'hi', 5000)
  c.seen('onebot', 'g1', 'A', 'u', 'hi', 5000)
  c.seen('onebot', 'g1', 'B', 'u', 'hi', 5000)
  c.seen('onebot', 'g1', 'B', 'u', 'hi', 5000)
  // per-account attributes (image URL, quoted message id) and whitespace do not matter
  c.seen('onebot', 'g1', 'A', 'u', 'a  <img src="x?rkey=A"/>', 6000)
  c.seen('onebot', 'g1', 'B', 'u', 'a <img src="x?rkey=B"/>', 6000)
  // another sender, channel or platform is another message
  c.seen('onebot', 'g1', 'A', 'v', 'hi', 5000)
  c.seen('onebot', 'g2', 'A', 'u', 'hi', 5000)
  c.seen('other', 'g1', 'A', 'u', 'hi', 5000)
  // the same text much later (past the time tolerance) is a new message
  c.seen('onebot', 'g1', 'B', 'u', 'hi', 5000 + TIME_TOLERANCE + 1)
  assert.equal(c.size, 3)
  let taken = /** @type {NonNullable<ReturnType<typeof c.take>>} */ (c.take())
  assert.deepEqual(MessageCounter.events(taken), [
    { type: 'messages', platform: 'onebot', counts: Object.assign(Object.create(null), { g1: 6, g2: 1 }) },
    { type: 'messages', platform: 'other', counts: Object.assign(Object.create(null), { g1: 1 }) },
  ])
  assert.equal(c.take(), null)

  // a late copy within the window is still recognised; after the window it is counted
  c.seen('onebot', 'g1', 'A', 'u', 'later', 9000)
  now += WINDOW - 1
  assert.equal(c.seen('onebot', 'g1', 'B', 'u', 'later', 9000), false)
  now += 2
  c.seen('onebot', 'g1', 'C', 'u', 'later', 9000)
  assert.equal(/** @type {any} */ (c.take()).get('onebot').get('g1'), 2)
  assert.equal(c.remembered, 1)

  // restore: counts of a failed report come back, added to those made since
  c.seen('onebot', 'g1', 'A', 'w', 'x', 1)
  taken = /** @type {any} */ (c.take())
  c.seen('onebot', 'g1', 'A', 'w', 'y', 1)
  c.seen('onebot', 'g3', 'A', 'w', 'y', 1)
  c.restore(taken)
  assert.deepEqual([...(/** @type {any} */ (c.take())).get('onebot')], [['g1', 2], ['g3', 1]])

  // at most maxChannels channels pending: the rest is dropped and counted as dropped
  for (const g of ['a', 'b', 'c', 'd', 'e']) c.seen('onebot', g, 'A', 'w', 'z', 1)
  assert.equal(c.size, 3)
  assert.equal(c.dropped, 2)
  // at most maxRecent messages remembered
  for (let i = 0; i < 500; i++) c.seen('onebot', 'a', 'A', 'w', 'n' + i, 1)
  assert.ok(c.remembered <= 100)
  assert.equal(c.recent.size, c.remembered)
  // a channel's count stops at what the service accepts in one report
  c.add('onebot', 'a', MAX_COUNT)
  assert.equal(/** @type {any} */ (c.take()).get('onebot').get('a'), MAX_COUNT)
})

test('message counter: content normalisation and channel ids', () => {
  assert.equal(normalize(' a\n b <at id="1" name="x"/> <img src="u"/><quote id="9">q</quote> '), 'a b <at/> <img/><quote>q</quote>')
  assert.equal(normalize('1 &lt; 2'), '1 &lt; 2')
  assert.ok(validChannel('123456'))
  assert.ok(!validChannel(''))
  assert.ok(!validChannel('x'.repeat(256)))
  assert.ok(validChannel('é'.repeat(127)))
  assert.ok(!validChannel('é'.repeat(128)))
  assert.ok(!validChannel('a\nb'))
})
