#ifndef XFER_CCRC64_H
#define XFER_CCRC64_H

#include <stddef.h>
#include <stdint.h>

/* CRC-64/NVME by carry-less multiplication (PCLMULQDQ), for the bulk of a
 * buffer: Debian's ISA-L 2.30 has no CRC-64 of this polynomial. Swift's
 * CRC64NVME (XferPrimitives) calls these and keeps its tables for the rest. */

/* Nonzero when this CPU has PCLMULQDQ (x86-64 only; elsewhere always 0). */
int xfer_crc64nvme_accelerated(void);

/* The raw (unconditioned) reflected register after `blocks` blocks of 128
 * bytes at `bytes`, starting from `crc`. Only when accelerated() said so. */
uint64_t xfer_crc64nvme_blocks(uint64_t crc, const uint8_t *bytes, size_t blocks);

#endif
