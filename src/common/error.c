/* Error codes to text, DSL_BUG and dsl_seterr. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/quote.h"
#include "dslaunch/common/banned.h"

const char *dsl_strerror(int code)
{
    switch (code) {
    case 0: return "success";
    case DSL_EUSAGE: return "bad usage";
    case DSL_EHOSTFILE: return "bad hostfile";
    case DSL_EPLACEMENT: return "bad placement";
    case DSL_ECONFIG: return "bad configuration";
    case DSL_ECONNECT: return "host unreachable";
    case DSL_EAUTH: return "authentication failed";
    case DSL_EREMOTE: return "remote side failed";
    case DSL_ETIMEDOUT: return "timed out";
    case DSL_EPROTO: return "protocol error";
    case DSL_EPREFLIGHT: return "preflight check failed";
    case DSL_EVERSION: return "version mismatch";
    case DSL_ETOKEN: return "wrong job token";
    case DSL_EPEER: return "peer failed";
    case DSL_ESPAWN: return "cannot start program";
    case DSL_EDATA: return "bad data";
    case DSL_ECHECKPOINT: return "bad checkpoint";
    case DSL_ECANCELED: return "canceled";
    case DSL_ENOTSUP: return "not supported";
    case DSL_ENOTREG: return "not a regular file (a FIFO, socket or device): not reading it";
    case DSL_ENOGPU: return "no GPU for this rank";
    default: break;
    }
    if (code < 0 && code > -4096)
        return strerror(-code);
    return "unknown error";
}

_Noreturn void dsl_bug_at(const char *file, int line, const char *msg)
{
    fprintf(stderr, "BUG: %s:%d: %s\n", file, line, msg);
    abort();
}

int dsl_seterr(char *err, int code, const char *fmt, ...)
{
    if (err) {
        /* formatted aside first: the arguments may include err itself; then escaped,
           so that no message carries a control character, whatever it quotes */
        char tmp[DSL_ERR_LEN];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(tmp, sizeof(tmp), fmt, ap);
        va_end(ap);
        dsl_quote_for_humans(err, DSL_ERR_LEN, tmp, strlen(tmp));
    }
    return code;
}
