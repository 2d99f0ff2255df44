// @ts-check
'use strict'
// The pure parts: the SSE parser, the backoff, error classification, the default reporter name.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { SseParser, backoff, isOutage, HttpError, NetworkError } = require('../src/client')
const { isUnique } = require('../src/applier')
const { defaultReporter, Config } = require('../src')

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
