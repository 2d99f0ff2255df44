// @ts-check
'use strict'
// The plugin pointed at a follower: two service instances on one PostgreSQL and one Redis
// (`leadership:`), `a` leads and `b` follows. A follower answers every change with 409 and the
// leader's API address; the commands and Koishi's `assign` send the change there once more (and
// the rest of the same command too), so the admin sees no difference. The fleet is reported to
// the leader as well (a follower's sources are its own), under another reporter name.
//
//   bots 1001, 1002: groups 1-2

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { mkdirSync, mkdtempSync, rmSync } = require('node:fs')
const { tmpdir } = require('node:os')
const { join } = require('node:path')
const admin = require('@koishijs/plugin-admin')
const plugin = require('../src')
const zh = require('../locales/zh-CN.json')
const en = require('../locales/en-US.json')
const { createKoishi, captureLogs, waitFor, oneBot, fill, PLATFORM } = require('./support/koishi')
const { Service, freePort, TOKEN } = require('./support/service')
const { Postgres } = require('./support/postgres')
const { Redis } = require('./support/redis')

const G = (/** @type {number} */ i) => String(700000 + i)
const GROUPS = [G(1), G(2)]
const BOTS = ['1001', '1002']

test('pointed at a follower: pin, rebalance, assign and unpin reach the leader (409 → the leader, once)', async () => {
  // Not skipped when missing: scripts/test.sh installs both, and a silent skip would hide it.
  assert.ok(Postgres.available(), 'PostgreSQL 15 is not installed (initdb, pg_ctl): run scripts/test.sh, which installs it')
  assert.ok(Redis.available(), 'redis-server is not installed: run scripts/test.sh, which installs it')
  const dir = mkdtempSync(join(tmpdir(), 'koishi-auto-assign-follower-'))
  const pg = await Postgres.start()
  const redis = await Redis.start()
  /** @param {string} name */
  const instance = async (name) => {
    const home = join(dir, name)
    mkdirSync(home)
    return new Service({
      dir: home, port: await freePort(), database: pg.url,
      extra: [`redis: {url: "${redis.url}"}`, `leadership: {instance: ${name}, leaseTtl: 2}`],
    })
  }
  const a = await instance('a')
  const b = await instance('b')
  /** @type {Awaited<ReturnType<typeof createKoishi>> | undefined} */
  let koishi
  const logs = captureLogs()
  try {
    await a.start()
    const role = async (/** @type {Service} */ s) => (await (await fetch(s.endpoint + '/healthz')).json()).leadership?.role
    await waitFor(async () => (await role(a)) === 'leader', 5000, 'a leads')
    await b.start()
    assert.equal(await role(b), 'follower')
    // the fleet, as the leader hears it
    const fleet = { bots: BOTS.map(id => ({ platform: PLATFORM, id, online: true, channels: GROUPS })) }
    assert.equal((await a.api('PUT', '/v1/fleet/reporters/elsewhere', fleet)).status, 200)
    koishi = await createKoishi({
      dir,
      bots: BOTS.map(selfId => ({ selfId, guilds: GROUPS })),
      plugin,
      pluginConfig: {
        endpoint: b.endpoint, token: TOKEN, reporter: 'koishi-follower', heartbeatInterval: 1000,
        retryMin: 100, retryMax: 500, requestTimeout: 3000, messageReportInterval: 0,
      },
      before: [[admin, {}]],
    })
    const k = koishi
    await k.app.database.createUser(PLATFORM, 'admin', { authority: 4 })
    await k.app.database.createUser(PLATFORM, 'admin-en', { authority: 4, locales: ['en-US'] })
    for (const g of GROUPS) await k.app.database.createUser(PLATFORM, 'u' + g, { authority: 1 })
    // the follower mirrors the leader's assignment; the plugin writes it
    const agreed = () => waitFor(async () => {
      const want = await a.assignments()
      const answers = await k.answers(GROUPS)
      return GROUPS.every(g => want[g] && JSON.stringify(answers[g]) === JSON.stringify([want[g]])) ? want : null
    }, 8000, "Koishi answers as the leader assigns")
    let want = await agreed()
    const pinOf = async (/** @type {string} */ g) => /** @type {any[]} */ ((await a.api('GET', '/v1/pins')).body.pins).find(p => p.channel === g) ?? null

    // a pin: the follower refuses, the leader takes it
    const [g1, g2] = GROUPS
    const other = want[g1] === '1001' ? '1002' : '1001'
    let r = oneBot(await k.ask(g1, 'admin', `分配.固定 ${other}`))
    assert.deepEqual(r.texts, [fill(zh.commands['auto-assign.pin'].messages.done, { channel: g1, bot: other, made: '' })])
    assert.equal((await pinOf(g1))?.bot, other)
    want = await agreed()
    assert.equal(want[g1], other)
    assert.equal((await b.api('PUT', `/v1/pins/onebot/${g1}`, { bot: other })).status, 409, 'the follower does refuse changes')

    // a rebalance, in English, waited for at the leader
    r = oneBot(await k.ask(g1, 'admin-en', 'auto-assign.rebalance'))
    assert.match(r.texts[0], /^Rebalance #\d+ done: \d+ group\(s\) moved\.$/)

    // plugin-admin's assign: pinned at the leader
    want = await agreed()
    const to = want[g2] === '1001' ? '1002' : '1001'
    r = oneBot(await k.ask(g2, 'admin', `assign <at id="${to}"/>`))
    assert.deepEqual(r.texts, [fill(zh['auto-assign'].assign.pinned, { channel: g2, bot: to }), '频道数据已修改。'])
    assert.equal((await pinOf(g2))?.note, 'Koishi assign by onebot:admin')
    want = await agreed()
    assert.equal(want[g2], to)

    // released
    r = oneBot(await k.ask(g2, 'admin-en', `auto-assign.unpin ${g1}`))
    want = await agreed()
    assert.deepEqual(r.texts, [fill(en.commands['auto-assign.unpin'].messages.done, {
      channel: g1, what: fill(en.commands['auto-assign.unpin'].messages['was-pinned'], { bot: other }), assignee: want[g1],
    })])
    assert.equal(await pinOf(g1), null)
    const refusals = logs.records.filter(x => x.name === 'auto-assign' && /refused|follows/.test(x.content))
    assert.deepEqual(refusals.map(x => x.content), [])
  } finally {
    await koishi?.stop().catch(() => {})
    logs.restore()
    await b.stop()
    await a.stop()
    await redis.stop()
    pg.stop()
    rmSync(dir, { recursive: true, force: true })
  }
})
