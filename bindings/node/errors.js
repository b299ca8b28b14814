'use strict'
// The errors the JavaScript glue throws itself (what the native addon does
// not see: a wrong kind of value, an unknown option name), with the codes
// the native errors use.

function coded(message, code) {
  const e = new TypeError(message)
  e.code = code
  return e
}

/** A value of the wrong kind. */
const typeError = (message) => coded(message, 'ERR_INVALID_ARG_TYPE')
/** A value of the right kind that cannot be used. */
const valueError = (message) => coded(message, 'ERR_INVALID_ARG_VALUE')
/** An option name the glue does not know. */
const invalidOption = (message) => coded(message, 'ERR_RATEBOUND_INVALID_OPTION')

module.exports = { typeError, valueError, invalidOption }
