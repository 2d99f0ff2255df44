// @ts-check
'use strict'
// A throwaway PostgreSQL 15 server on a free loopback port, for the service's `database.url`
// (as the Rust tests' support starts it): initdb in a temporary directory, trust auth, no fsync.
// Run as the `postgres` user when the tests run as root, since PostgreSQL refuses root.

const { execFileSync } = require('node:child_process')
const { existsSync, mkdtempSync, rmSync } = require('node:fs')
const { tmpdir } = require('node:os')
const { join } = require('node:path')
const { freePort } = require('./service')

/** The PostgreSQL tool `name`, or null when PostgreSQL is not installed. @param {string} name */
function pgBin(name) {
  for (const dir of ['/usr/lib/postgresql/15/bin', '/usr/local/bin', '/usr/bin']) {
    const p = join(dir, name)
    if (existsSync(p)) return p
  }
  return null
}

const asRoot = typeof process.getuid === 'function' && process.getuid() === 0

class Postgres {
  /** Whether initdb and pg_ctl are installed. */
  static available() {
    return !!(pgBin('initdb') && pgBin('pg_ctl'))
  }

  static async start() {
    const dir = mkdtempSync(join(tmpdir(), 'koishi-auto-assign-pg-'))
    const pg = new Postgres(dir, await freePort())
    if (asRoot) execFileSync('chown', ['-R', 'postgres:postgres', dir])
    pg.run('initdb', ['-D', pg.data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync'])
    pg.run('pg_ctl', ['-D', pg.data, '-o', pg.options(), '-l', join(dir, 'log'), '-w', 'start'])
    pg.running = true
    return pg
  }

  /** @param {string} dir @param {number} port */
  constructor(dir, port) {
    this.dir = dir
    this.port = port
    this.data = join(dir, 'data')
    this.url = `postgres://postgres@127.0.0.1:${port}/postgres`
    this.running = false
  }

  options() {
    return `-p ${this.port} -c listen_addresses=127.0.0.1 -k ${this.dir} -c fsync=off`
  }

  /** @param {string} tool @param {string[]} args */
  run(tool, args) {
    const bin = pgBin(tool)
    if (!bin) throw new Error(`PostgreSQL's ${tool} is not installed (apt-get install postgresql)`)
    const [cmd, argv] = asRoot ? ['runuser', ['-u', 'postgres', '--', bin, ...args]] : [bin, args]
    try {
      execFileSync(cmd, argv, { stdio: 'pipe' })
    } catch (e) {
      const err = /** @type {any} */ (e)
      throw new Error(`${tool} ${args.join(' ')}: ${err.stdout ?? ''}${err.stderr ?? ''}`)
    }
  }

  /** Stops the server and removes its directory. */
  stop() {
    if (this.running) {
      this.running = false
      try { this.run('pg_ctl', ['-D', this.data, '-m', 'immediate', 'stop']) } catch {}
    }
    rmSync(this.dir, { recursive: true, force: true })
  }
}

module.exports = { Postgres }
